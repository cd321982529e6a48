"""How often the admission gate (evolver/gate.py) admits a candidate that is no better than the member,
and how often it admits a real gain, on simulated dev splits: the plain percentile bootstrap beside the
expanded one the gate uses, at the whole split's look (95%) and the early look on half of it
(:func:`evolver.gate.interim_level`, 99.44%).

    python bench/gate_error.py [--runs 2000] [--tasks 24]

Two kinds of per-task differences: ``normal`` (a gain plus normal noise of sd 0.3, clipped to [-1, 1])
and ``binary`` (each task solved by either program with the task's own chance, won or lost: differences
-1, 0 or 1, mostly ties, as a game benchmark scores). A one-sided error: "admitted" is the interval's
low end above 0, so the nominal rate is half of one minus the level.
"""
from __future__ import annotations

import argparse

import numpy as np

from evolver.gate import interim_level, paired_bootstrap


def normal(rng, n: int, gain: float) -> np.ndarray:
    return np.clip(rng.normal(gain, 0.3, n), -1, 1)


def binary(rng, n: int, gain: float) -> np.ndarray:
    p = rng.uniform(0, 1 - gain, n)
    return (rng.random(n) < p + gain).astype(float) - (rng.random(n) < p).astype(float)


def admitted(kind, n: int, level: float, gain: float, runs: int, expand: bool) -> float:
    rng = np.random.default_rng(3)
    hits = sum(paired_bootstrap(kind(rng, n, gain), np.zeros(n), level, 2000, r, expand=expand)[1] > 1e-12
               for r in range(runs))
    return hits / runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--tasks", type=int, default=24)
    args = ap.parse_args()
    looks = ((args.tasks, 0.95), (args.tasks // 2, interim_level(0.95, 0.5)))
    print(f"{'data':7} {'tasks':>5} {'level':>7} {'nominal':>8} {'gain':>5} {'plain':>7} {'expanded':>9}")
    for name, kind in (("normal", normal), ("binary", binary)):
        for n, level in looks:
            for gain in (0.0, 0.2):
                plain, expanded = (admitted(kind, n, level, gain, args.runs, e) for e in (False, True))
                nominal = f"{(1 - level) / 2:.2%}" if gain == 0 else ""
                print(f"{name:7} {n:5d} {level:7.2%} {nominal:>8} {gain:5.1f} {plain:7.2%} {expanded:9.2%}",
                      flush=True)


if __name__ == "__main__":
    main()
