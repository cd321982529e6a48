"""How much imitation buys per minute of CPU: cold-start SFT on the demonstrations of twx-easy training
tasks at several sizes and settings, each from the base model in one workspace, each timed and
evaluated on the same tasks. This sizes the default run's imitation proposer.

    .venv/bin/python bench/imitation_budget.py [--split dev] [--per-category 4] \
        [--variant 'per_category=4,lr=3e-5' --variant 'per_category=4,lr=1e-4,train_layers=10' ...]

Every variant runs through the CLI a user types (``evolver train --sft --set plugins.sft.KEY=VALUE``,
then ``evolver eval --program ...``); the seed program is evaluated once on the same tasks.
"""
from __future__ import annotations

import argparse
import os
import re
import tempfile
from pathlib import Path

from yardstick import evolver, latest_eval

DEFAULT_VARIANTS = ["per_category=4,lr=3e-5", "per_category=4,lr=1e-4", "per_category=4,lr=1e-4,train_layers=10"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="dev")
    ap.add_argument("--per-category", type=int, default=4, help="evaluation tasks per game")
    ap.add_argument("--variant", action="append", default=[], help="comma-separated plugins.sft KEY=VALUE")
    ap.add_argument("--store", default=None)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every command, e.g. 'seed_skills=twx-experts' (twx's "
                         "hand-written pack) or 'seed_skills=[\"quantity-order\"]' (one of its skills)")
    args = ap.parse_args()
    common = [x for kv in args.overrides for x in ("--set", kv)]
    store = Path(args.store or tempfile.mkdtemp(prefix="imitation-")).resolve()
    store.mkdir(parents=True, exist_ok=True)
    n = str(args.per_category)
    evolver(store, *common, "init")
    wall, _ = evolver(store, *common, "eval", "--split", args.split, "--per-category", n)
    rows = [("seed program", None, None, wall, latest_eval(store))]
    for variant in args.variant or DEFAULT_VARIANTS:
        sets = [x for kv in variant.split(",") for x in ("--set", f"plugins.sft.{kv.strip()}")]
        train_s, out = evolver(store, *common, "train", "--sft", "--set", "plugins.sft.seed_bank=false", *sets)
        program = re.search(r"committed as program (\S+)", out).group(1)
        samples = re.search(r"sft-step-(\d+)", out)
        wall, _ = evolver(store, *common, "eval", "--split", args.split, "--per-category", n, "--program", program)
        rows.append((variant, samples.group(1) if samples else "?", train_s, wall, latest_eval(store)))
        print(rows[-1], flush=True)
    print(f"\ntwx-easy {args.split}, {args.per_category} tasks per game, embedded SmolLM2-135M, "
          f"{os.cpu_count()} CPU cores; {' '.join(args.overrides) or 'default config'}; workspace {store}")
    print("| imitation (plugins.sft) | SFT steps | SFT min | eval min | score | games won | per game |")
    print("|---|---|---|---|---|---|---|")
    for name, samples, train_s, wall, ev in rows:
        per = ", ".join(f"{k} {v:.2f}" for k, v in ev["per_category"].items())
        print(f"| {name} | {samples or ''} | {'' if train_s is None else f'{train_s / 60:.1f}'} | {wall / 60:.1f} | "
              f"{ev['score']:.3f} | {ev['won']:.0%} of {ev['episodes']} | {per} |")


if __name__ == "__main__":
    main()
