"""Rollout engines side by side: tokens/s of sampled generation with log-probs at several batch sizes,
greedy-text equality with transformers' own ``generate``, each engine's log-prob gap to the fp32
learner on its own samples, and the bandwidth limit of the device (bytes read per decode step).

Variants (``--variants``, comma-separated; ``NAME@B1/B2`` limits one to those batch sizes):
  graphs-fp32, graphs-bf16   evolver's transformers backend, static KV cache + CUDA graphs (``decode="graphs"``)
  static-fp32, static-bf16   the same static step without graphs (``decode="static"``)
  loop-fp32, loop-bf16       evolver's decode loop (``decode="loop"``, the CPU path)
  compiled-fp32, compiled-bf16   the graphs of a ``torch.compile``d step (``decode="compiled"``; compiles per shape)
  generate-fp32, generate-bf16   transformers' ``model.generate`` with its defaults (dynamic cache)
  gstatic-fp32               ``generate(cache_implementation="static", disable_compile=True)``
  gcompile-fp32              ``generate(cache_implementation="static")``: transformers compiles the forward
  vllm-fp32, vllm-bf16       vLLM (``--vllm-python``: the interpreter of an environment that has it)
Each group (evolver's, generate's, generate's compiled, vLLM) runs in its own process, under its own
timeout; a variant that fails prints its error and the rest go on.

    python bench/grpo_engines.py [--batches 1,8,32,128] [--tokens 128] [--variants ...] [--greedy-batch 128]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PROMPTS = ["What is 17 + 25?", "Name three colours.", "Write one sentence about rivers.",
           "How many legs does a spider have?", "Say hello in French.", "What comes after Tuesday?",
           "Give a synonym for quick.", "What is the capital of Italy?"]
DEFAULT = ("graphs-fp32,graphs-bf16,static-fp32,loop-fp32,generate-fp32,generate-bf16@128,gstatic-fp32,"
           "gcompile-fp32@128")
GROUPS = {"graphs": "ours", "static": "ours", "loop": "ours", "compiled": "compiled", "generate": "generate",
          "gstatic": "generate", "gcompile": "gcompile", "vllm": "vllm"}
HBM_TB_S = float(os.environ.get("HBM_TB_S", "4.8"))  # H200


def prompt(i: int, distinct: bool) -> str:
    return PROMPTS[i % len(PROMPTS)] + (f" (case {i})" if distinct else "")


def requests(n: int, tokens: int, seed: int, greedy: bool = False):
    from evolver.types import GenRequest, Message

    return [GenRequest([Message("user", prompt(i, greedy))], max_tokens=tokens, temperature=0.0 if greedy else 1.0,
                       seed=seed + i, logprobs=True) for i in range(n)]


class HFGenerate:
    """transformers' own ``model.generate`` on left-padded batches: what a user would otherwise pick.
    ``cache``: None (its default dynamic cache) or "static"; ``compile``: let it compile the forward
    (it does so by itself with a static cache on a GPU unless told not to)."""

    def __init__(self, folder: str, dtype: str, device: str, cache: str | None = None, compile: bool = False):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.dev = torch.device(device)
        self.tok = AutoTokenizer.from_pretrained(folder)
        self.tok.padding_side = "left"
        self.model = AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.bfloat16 if dtype == "bf16" else torch.float32).to(self.dev).eval()
        self.eos = self.tok.eos_token_id
        self.kw: dict = {}
        if cache:
            self.kw["cache_implementation"] = cache
            if not compile:
                self.kw["disable_compile"] = True

    def generate(self, reqs, margins: bool = False):
        import types

        import torch

        texts = [self.tok.apply_chat_template([{"role": m.role, "content": m.content} for m in r.messages],
                                              tokenize=False, add_generation_prompt=True) for r in reqs]
        enc = self.tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.dev)
        greedy = reqs[0].temperature <= 0
        torch.manual_seed(reqs[0].seed or 0)
        sampling = {} if greedy else {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
        with torch.no_grad():
            out = self.model.generate(**enc, do_sample=not greedy, max_new_tokens=reqs[0].max_tokens,
                                      min_new_tokens=0, output_logits=True, return_dict_in_generate=True,
                                      pad_token_id=self.eos, **sampling, **self.kw)
            P = enc["input_ids"].shape[1]
            new = out.sequences[:, P:]
            logits = torch.stack(out.logits, 1).float()
            lps = (logits.gather(-1, new[..., None])[..., 0] - torch.logsumexp(logits, -1)).tolist()
            gap = (logits.topk(2, dim=-1).values.diff(dim=-1)[..., 0].abs().tolist() if margins else None)
        res = []
        for r, ids in enumerate(new.tolist()):
            n = ids.index(self.eos) + 1 if self.eos in ids else len(ids)
            prompt_ids = enc["input_ids"][r][enc["attention_mask"][r].bool()].tolist()
            res.append(types.SimpleNamespace(prompt_ids=prompt_ids, completion_ids=ids[:n], logprobs=lps[r][:n],
                                             completion_tokens=n, margins=gap[r][:n] if gap else None))
        return res


def make_engine(variant: str, folder: str, device: str, max_batch: int):
    kind, dtype = variant.rsplit("-", 1)
    note = ""
    if kind in ("graphs", "static", "loop", "compiled"):
        import torch

        from evolver_transformers.backend import TransformersBackend

        decode = kind
        if kind in ("graphs", "compiled") and not (device.startswith("cuda") and torch.cuda.is_available()):
            decode, note = "static", "graphs need CUDA: the eager static step timed instead"
        eng = TransformersBackend(model=folder, dtype=dtype, max_batch=max_batch, device=device, decode=decode)
    elif kind == "generate":
        eng = HFGenerate(folder, dtype, device)
    elif kind == "gstatic":
        eng = HFGenerate(folder, dtype, device, cache="static")
    elif kind == "gcompile":
        eng = HFGenerate(folder, dtype, device, cache="static", compile=True)
    elif kind == "vllm":
        from evolver_vllm.backend import VLLMBackend

        eng = VLLMBackend(model=folder, dtype=dtype)
    else:
        raise SystemExit(f"unknown variant {variant!r}")
    return eng, note


def run_variant(variant: str, batches: list[int], tokens: int, greedy_batch: int, device: str, outdir: str) -> dict:
    import torch

    from evolver_training.logprobs import completion_logprobs
    from evolver_transformers.embedded import embedded_model_dir

    folder = str(embedded_model_dir())
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    eng, note = make_engine(variant, folder, device, max(batches + [greedy_batch]))
    out: dict = {"variant": variant, "batches": batches, "note": note}
    timing = getattr(eng, "timing", None)
    graphs = variant.startswith(("graphs", "compiled"))
    if not variant.startswith("compiled"):  # (a compiled step compiles once per shape: only the timed ones)
        eng.generate(requests(2, 4, 0))  # warm up
    res = None
    for b in batches:
        if graphs:  # the first call at a new (bucket, width) captures its graph: not timed
            t0 = time.perf_counter()
            eng.generate(requests(b, tokens, 50 * b))
            out[f"first_s_b{b}"] = time.perf_counter() - t0
        if timing is not None:
            timing.clear()
        sync()
        t0 = time.perf_counter()
        res = eng.generate(requests(b, tokens, 100 * b))
        sync()
        dt = time.perf_counter() - t0
        n = sum(r.completion_tokens for r in res)
        out[f"tok_s_b{b}"] = n / dt
        out[f"mean_len_b{b}"] = n / b
        if timing is not None and timing.get("decode_steps"):
            out[f"step_ms_b{b}"] = 1000 * timing["decode_s"] / timing["decode_steps"]
        print(f"  {variant} b={b}: {n / dt:.0f} tok/s ({dt:.2f} s)", file=sys.stderr, flush=True)
    if hasattr(eng, "decode_path"):
        out["path"], out["error"] = eng.decode_path, eng.decode_error
    # the learner (fp32, as the trainer's) scores the engine's own samples of the largest batch
    sample = res[:32]
    from transformers import AutoModelForCausalLM

    learner = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device)
    with torch.no_grad():
        lp = completion_logprobs(learner, [r.prompt_ids for r in sample], [r.completion_ids for r in sample])
    eng_lp = torch.tensor([x for r in sample for x in r.logprobs])
    out["mean_abs_dlogp"] = float((lp.cpu() - eng_lp).abs().mean())
    out["max_abs_dlogp"] = float((lp.cpu() - eng_lp).abs().max())
    del learner
    if variant.endswith("fp32") and greedy_batch:
        greedy = (eng.generate(requests(greedy_batch, tokens, 0, greedy=True), margins=True)
                  if isinstance(eng, HFGenerate) else eng.generate(requests(greedy_batch, tokens, 0, greedy=True)))
        with open(os.path.join(outdir, f"greedy-{variant}.json"), "w") as f:
            json.dump([{"prompt": r.prompt_ids, "ids": r.completion_ids, "margins": getattr(r, "margins", None)}
                       for r in greedy], f)
    cfg = getattr(getattr(eng, "hf_model", None) or getattr(eng, "model", None), "config", None)
    if cfg is not None:
        m = getattr(eng, "hf_model", None) or eng.model
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        out["params"] = sum(p.numel() for p in m.parameters())
        out["kv_values_per_token"] = 2 * cfg.num_hidden_layers * heads * dim
        out["prompt_len"] = sum(len(r.prompt_ids) for r in res) / len(res)
    if timing is not None:
        out["graph_capture_s"] = timing.get("graph_capture_s", 0.0)
    return out


def child(args) -> None:
    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    for spec in args.variants.split(","):
        variant, _, only = spec.partition("@")
        batches = [int(b) for b in only.split("/")] if only else [int(b) for b in args.batches.split(",")]
        t0 = time.perf_counter()
        try:
            row = run_variant(variant, batches, args.tokens, args.greedy_batch, device, args.outdir)
        except Exception as exc:  # noqa: BLE001 - one variant failing must not hide the others
            traceback.print_exc()
            row = {"variant": variant, "batches": batches, "failed": f"{type(exc).__name__}: {exc}"[:300]}
        row["wall_s"] = time.perf_counter() - t0
        print("RESULT " + json.dumps(row), flush=True)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def compare_greedy(outdir: str, ref: str = "generate-fp32") -> list[str]:
    """Greedy completions of each fp32 variant against ``ref``'s: rows identical, and where a row
    differs, ``ref``'s top-2 logit gap at the first differing token (a tie within rounding, or a bug)."""
    path = os.path.join(outdir, f"greedy-{ref}.json")
    if not os.path.exists(path):
        return [f"greedy equality: no greedy output from {ref}"]
    want = json.load(open(path))
    lines = []
    for name in sorted(os.listdir(outdir)):
        if not name.startswith("greedy-") or name == f"greedy-{ref}.json":
            continue
        got = json.load(open(os.path.join(outdir, name)))
        variant = name[len("greedy-"):-len(".json")]
        same, gaps, prompts_same = 0, [], all(g["prompt"] == w["prompt"] for g, w in zip(got, want))
        for g, w in zip(got, want):
            if g["ids"] == w["ids"]:
                same += 1
                continue
            j = next((k for k, (a, b) in enumerate(zip(g["ids"], w["ids"])) if a != b), min(len(g["ids"]), len(w["ids"])))
            m = w["margins"][j] if w["margins"] and j < len(w["margins"]) else float("nan")
            gaps.append((j, m))
        line = f"greedy {variant} vs {ref}: {same}/{len(want)} rows identical (prompts identical: {prompts_same})"
        if gaps:
            line += "; differing rows (first token, ref's top-2 logit gap there): " + ", ".join(
                f"({j}, {m:.1e})" for j, m in gaps[:8])
        lines.append(line)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--variants", default=DEFAULT)
    ap.add_argument("--greedy-batch", type=int, default=128, help="rows of the greedy-equality check (0: off)")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda")
    ap.add_argument("--vllm-python", default=None, help="interpreter of an environment with vLLM (adds vllm-*)")
    ap.add_argument("--timeouts", default="ours=200,generate=150,compiled=150,gcompile=150,vllm=200",
                    help="seconds per group process")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--outdir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    outdir = args.outdir or tempfile.mkdtemp(prefix="engines-")
    specs = args.variants.split(",")
    if args.vllm_python and not any(s.startswith("vllm") for s in specs):
        specs += ["vllm-fp32", "vllm-bf16"]
    timeouts = dict((k, float(v)) for k, v in (kv.split("=") for kv in args.timeouts.split(",")))
    order = ["generate", "ours", "compiled", "gcompile", "vllm"]  # generate first: its greedy output is the reference
    open(os.path.join(outdir, "rows.jsonl"), "a").close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plugins", "grpo"), os.environ.get("PYTHONPATH", "")])}
    for group in order:
        mine = [s for s in specs if GROUPS.get(s.partition("@")[0].rsplit("-", 1)[0]) == group]
        if not mine:
            continue
        python = args.vllm_python if group == "vllm" else sys.executable
        if python is None:
            continue
        cmd = [python, os.path.abspath(__file__), "--child", "--variants", ",".join(mine), "--tokens", str(args.tokens),
               "--batches", args.batches, "--greedy-batch", str(args.greedy_batch), "--device", args.device,
               "--outdir", outdir]
        t0 = time.perf_counter()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeouts.get(group, 200))
            stdout, stderr, timed_out = done.stdout, done.stderr, False
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            timed_out = True
        got = [json.loads(ln[7:]) for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        finished = {r["variant"] for r in got}
        for s in mine:
            if s.partition("@")[0] not in finished:
                why = (f"timed out after {timeouts.get(group, 200):.0f} s" if timed_out else "process failed")
                got.append({"variant": s.partition("@")[0], "failed": why})
        with open(os.path.join(outdir, "rows.jsonl"), "a") as f:  # a later call with this --outdir reports them too
            f.writelines(json.dumps(r) + "\n" for r in got)
        progress = [ln for ln in stderr.splitlines() if ln.startswith("  ")]
        print(f"[{group}: {time.perf_counter() - t0:.0f} s{', TIMED OUT' if timed_out else ''}] "
              + "; ".join(p.strip() for p in progress[-4:]), flush=True)
        if any("failed" in r for r in got) or (timed_out or not got):
            print("\n".join(stderr.splitlines()[-25:]), file=sys.stderr)
    rows = {}
    with open(os.path.join(outdir, "rows.jsonl")) as f:
        for ln in f:
            r = json.loads(ln)
            rows[r["variant"]] = r  # the latest row of each variant
    report(list(rows.values()), [int(b) for b in args.batches.split(",")], args.tokens, outdir)


def report(rows: list[dict], batches: list[int], tokens: int, outdir: str) -> None:
    print(f"\nSampled generation with log-probs, <= {tokens} new tokens, temperature 1 (tok/s; step ms at the "
          "largest batch; log-prob gap of the engine's samples to the fp32 learner)\n")
    print("| variant | path | " + " | ".join(f"b={b}" for b in batches) + " | step ms | mean abs Δlogp | max | note |")
    print("|---|---|" + "---|" * len(batches) + "---|---|---|---|")
    for r in rows:
        if "failed" in r:
            print(f"| {r['variant']} | FAILED | " + " | ".join("" for _ in batches) + f" | | | | {r['failed']} |")
            continue
        cells = [f"{r[f'tok_s_b{b}']:.0f}" if f"tok_s_b{b}" in r else "-" for b in batches]
        step = next((f"{r[f'step_ms_b{b}']:.2f}" for b in reversed(batches) if f"step_ms_b{b}" in r), "")
        note = "; ".join(x for x in (r.get("note"), r.get("error")) if x)
        if r.get("graph_capture_s"):
            note = (note + "; " if note else "") + f"graph capture {r['graph_capture_s']:.1f} s"
        print(f"| {r['variant']} | {r.get('path', '')} | " + " | ".join(cells)
              + f" | {step} | {r['mean_abs_dlogp']:.1e} | {r['max_abs_dlogp']:.1e} | {note} |")
    ref = next((r for r in rows if r.get("params")), None)
    if ref:
        # bytes read per decode step: every weight once (fp32, or bf16 copies under autocast) and the KV
        # cache of every row at its average length over the reply (stored fp32 / bf16 likewise)
        L = ref["prompt_len"] + tokens / 2
        cells = {}
        for dtype, nbytes in (("fp32", 4), ("bf16", 2)):
            cells[dtype] = [b / ((ref["params"] * nbytes + b * L * ref["kv_values_per_token"] * nbytes)
                                 / (HBM_TB_S * 1e12)) for b in batches]
        for dtype, vals in cells.items():
            print(f"| bandwidth limit {dtype} | {HBM_TB_S} TB/s | " + " | ".join(f"{v:.0f}" for v in vals)
                  + f" | | | | weights {ref['params'] / 1e6:.0f}M + KV of {L:.0f} tokens per row |")
    big = batches[-1]
    base = next((r for r in rows if r["variant"] == "generate-fp32" and f"tok_s_b{big}" in r), None)
    if base:
        for r in rows:
            if r["variant"] != "generate-fp32" and f"tok_s_b{big}" in r:
                print(f"{r['variant']} / generate-fp32 at b={big}: {r[f'tok_s_b{big}'] / base[f'tok_s_b{big}']:.2f}x")
    for line in compare_greedy(outdir):
        print(line)


if __name__ == "__main__":
    main()
