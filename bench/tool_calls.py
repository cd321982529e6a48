"""Tool calls on the embedded model: how often the seed's replies are well-formed, valid calls, and what the
grammar's mask costs a decode step, side by side in one run.

    .venv/bin/python bench/tool_calls.py [--benchmark shop-support] [--tasks 12] [--batch 8,32]

1. The seed program plays the same dev tasks twice with the same model: once as every request is answered
   today (decoded under the tools' grammar), once with the grammar off (the model writes freely and the
   harness parses the first JSON object that names a tool). Per side: replies to requests that carried
   tools, those that were calls, calls that validate against the task's tools (``ToolCalls.validate``),
   replies cut by their budget mid-call, and the mean score.
2. The mask's cost: the same batch of tool-call requests decoded with and without the grammar; per decode
   step, the whole step and the time spent computing and applying masks (``timing["mask_s"]``).

``shop-support`` is ``examples/tool_calling_benchmark.py`` (loaded here through ``EVOLVER_PLUGIN_PATH``); any
installed tool-calling benchmark can be named instead (``--benchmark agentdojo``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def workspace(benchmark: str, options: dict):
    if benchmark == "shop-support":
        os.environ["EVOLVER_PLUGIN_PATH"] = str(ROOT / "examples" / "tool_calling_benchmark.py")
    from evolver import open_run
    from evolver.config import Config

    tmp = Path(tempfile.mkdtemp(prefix="evolver-bench-"))
    try:
        with open_run(Config(store=str(tmp), benchmark=benchmark, benchmark_options=options, seed_skills=[])) as run:
            yield run, run.repo.checkout("seed")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def grammar_off():
    """The transformers engine with no grammar for any request: it decodes tool-call requests freely."""
    return mock.patch("evolver_transformers.backend.grammar_for", lambda req: None)


def call_rates(episodes, tasks) -> dict:
    from evolver import ToolCalls

    tools = {t.id: t.tools for t in tasks}
    replies = calls = valid = cut = 0
    for ep in episodes:
        for s in ep.steps:
            if s.tool_calls:  # a skill tool (read_skill / run_skill), not the task's
                continue
            replies += 1
            cut += bool(s.error and "did not finish its tool call" in s.error)
            call = ToolCalls.parse(s.action) if s.action.lstrip().startswith("{") else None
            if call:
                calls += 1
                valid += ToolCalls.validate(call, tools[ep.task.id]) is None
    return {"replies": replies, "calls": calls, "valid": valid, "cut": cut,
            "valid_rate": valid / replies if replies else 0.0,
            "score": statistics.fmean(e.score for e in episodes) if episodes else 0.0}


def play(run, seed, tasks, label):
    from evolver.evaluate import run_episodes
    from evolver.types import stable_hash

    seed.hash = stable_hash(label, time.time())  # no cache between the sides
    backend = run.backend("executor")
    t0 = time.perf_counter()
    eps = run_episodes(run.context(seed), run.benchmark, backend, tasks, store=run.store, run=run, use_cache=False)
    return eps, time.perf_counter() - t0


def engine(backend):
    while hasattr(backend, "inner"):
        backend = backend.inner
    return backend


def mask_cost(backend, requests, repeats: int = 3) -> dict:
    """One batch decoded with the grammar and without it (after a warm-up of each): per decode step, the
    whole step and the masks' part of it (computed for the batch and applied to the logits), the best of
    ``repeats``. The two sides decode different replies (a call ends sooner than free text), so the share
    that holds the claim is the masks' part of the grammar side's own steps."""
    out = {}
    for side in ("grammar", "free"):
        runs = []
        for i in range(repeats + 1):
            backend.timing.clear()
            backend._prefixes.clear()  # (each run pays its own prefill)
            with grammar_off() if side == "free" else mock.patch.dict(os.environ, {}):
                backend.generate(requests)
            t = dict(backend.timing)
            if i:  # the first is the warm-up (the grammar's compilation, torch's first calls)
                runs.append(t)
        t = min(runs, key=lambda t: t.get("decode_s", 0.0) / max(1, t.get("decode_steps", 1)))
        steps = max(1, t.get("decode_steps", 1))
        out[side] = {"step_ms": 1000 * t.get("decode_s", 0.0) / steps, "mask_ms": 1000 * t.get("mask_s", 0.0) / steps,
                     "share": t.get("mask_s", 0.0) / max(1e-9, t.get("decode_s", 0.0)), "steps": steps}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--benchmark", default="shop-support")
    ap.add_argument("--tasks", type=int, default=12, help="dev tasks played by each side")
    ap.add_argument("--batch", default="8,32", help="batch sizes of the mask-cost measurement")
    ap.add_argument("--options", default="{}", help="benchmark options as JSON")
    ap.add_argument("--no-play", action="store_true", help="only the mask's cost")
    args = ap.parse_args()
    with workspace(args.benchmark, json.loads(args.options)) as (run, seed):
        tasks = run.benchmark.tasks("dev")[:args.tasks]
        backend = engine(run.backend("executor"))
        rows = []
        for label in () if args.no_play else ("grammar", "free"):
            with grammar_off() if label == "free" else mock.patch.dict(os.environ, {}):
                eps, wall = play(run, seed, tasks, label)
            rows.append((label, call_rates(eps, tasks), wall))
        if rows:
            print(f"\n{args.benchmark}: the seed on {len(tasks)} dev tasks, {backend.model}")
            print(f"{'decoding':<10} {'replies':>7} {'calls':>6} {'valid':>6} {'cut':>4} {'valid rate':>10} {'score':>6} {'wall s':>7}")
        for label, r, wall in rows:
            print(f"{label:<10} {r['replies']:>7} {r['calls']:>6} {r['valid']:>6} {r['cut']:>4} "
                  f"{r['valid_rate']:>10.1%} {r['score']:>6.3f} {wall:>7.0f}")
        # the mask's cost: the first requests of the grammar side, as the harness made them
        first = eps_requests(run, seed, tasks)
        print(f"\nmask cost per decode step ({backend.decode_path} decoding, {backend.device})")
        print(f"{'batch':>5} {'steps':>5} {'step ms':>8} {'mask ms':>8} {'mask share':>10} {'free steps':>10} {'free step ms':>12}")
        for B in (int(b) for b in args.batch.split(",")):
            reqs = (first * (B // len(first) + 1))[:B]
            c = mask_cost(backend, reqs)
            g, f = c["grammar"], c["free"]
            print(f"{B:>5} {g['steps']:>5} {g['step_ms']:>8.1f} {g['mask_ms']:>8.2f} {g['share']:>10.1%} "
                  f"{f['steps']:>10} {f['step_ms']:>12.1f}")


def eps_requests(run, seed, tasks):
    """The first request the seed harness makes for each task (a tool-call request: FIRST_CALL), with a
    reply budget that lets a free reply run as long as a call."""
    from evolver.harness import make_harness, task_for_harness

    h = make_harness(run.context(seed))
    out = []
    for task in tasks:
        env = run.benchmark.env(task)
        try:
            obs = env.reset()
            req = h.next_call(h.start(task_for_harness(task, run.benchmark.harness_hints), obs), obs)
        finally:
            env.close()
        req.max_tokens = 96
        out.append(req)
    return out


if __name__ == "__main__":
    main()
