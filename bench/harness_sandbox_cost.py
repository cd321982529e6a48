"""What sandboxing the harness costs: the same twx-easy episodes played by the seed program with its harness
in-process and in a sandboxed subprocess (``loop.sandbox_harness``, the default in every stage), side by
side in one run, on the embedded model. Prints wall time, episodes per minute, the time spent outside
model calls, and the ratio; the episodes must come out the same.

    .venv/bin/python bench/harness_sandbox_cost.py [--per-category 6] [--passes 2]
"""
from __future__ import annotations

import argparse
import time

from action_modes import seed_workspace  # noqa: E402 (a sibling script)
from evolver.evaluate import evaluate_many
from evolver.harness_sandbox import SandboxedHarness
from evolver.sandbox import sandbox_mechanism


def play(run, seed, tasks, sandboxed: bool) -> tuple[float, list]:
    opened: list = []

    def factory(ctx):
        opened.append(SandboxedHarness(ctx))
        return opened[-1]
    t0 = time.perf_counter()
    try:
        (eps,) = evaluate_many([(run.context(seed), tasks)], run.benchmark, run.executor_for(seed),
                               harness_factory=factory if sandboxed else None)
    finally:
        for h in opened:
            h.close()
    return time.perf_counter() - t0, eps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-category", type=int, default=6)
    ap.add_argument("--passes", type=int, default=2, help="each row keeps its best pass")
    args = ap.parse_args()
    with seed_workspace() as (_, run, seed):
        tasks = run.benchmark.tasks("dev", per_category=args.per_category)
        play(run, seed, tasks[:2], False)  # warm the model and the JVM
        best: dict[bool, tuple[float, list]] = {}
        for _ in range(args.passes):
            for sandboxed in (False, True):
                wall, eps = play(run, seed, tasks, sandboxed)
                if sandboxed not in best or wall < best[sandboxed][0]:
                    best[sandboxed] = (wall, eps)
        same = [e.score for e in best[False][1]] == [e.score for e in best[True][1]]
        print(f"{len(tasks)} twx-easy dev episodes, seed program, embedded model; sandbox: {sandbox_mechanism()}")
        print("| harness | wall s | episodes/min | outside model calls s | steps |")
        print("|---|---|---|---|---|")
        for sandboxed in (False, True):
            wall, eps = best[sandboxed]
            model = sum(e.model_s for e in eps)
            print(f"| {'sandboxed subprocess' if sandboxed else 'in-process'} | {wall:.1f} | "
                  f"{60 * len(eps) / wall:.1f} | {wall - model:.1f} | {sum(len(e.steps) for e in eps)} |")
        print(f"sandboxed / in-process wall: {best[True][0] / best[False][0]:.3f}; same scores: {same}")


if __name__ == "__main__":
    main()
