"""The mission's yardstick on this machine: how far evolver's own pipeline takes the embedded 135M
model on twx-easy, on the test split, against the plain one-epoch SFT a user could run without us
(ENVIRONMENT.md: 0.57 mean dev score, 13 of 24 games won) and the target (0.9, 80% of games won, in
one hour of CPU). Every stage runs through the CLI a user types, in one workspace, and is timed:

    evolver init
    evolver eval  --split test --per-category N                  # the seed program
    evolver train --sft [--set plugins.sft.KEY=VALUE ...]        # cold-start SFT from gold paths
    evolver eval  --split test --per-category N --program sft-…  # the trained program

    .venv/bin/python bench/yardstick.py [--per-category 4] [--store DIR] [--sft KEY=VALUE ...]

The table gives each stage's wall time, the cumulative time, and the score, games won and per-game
scores of each evaluation. ``--sft seed_bank=false`` trains without a skill bank in the prompts.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

PLAIN_SFT = 0.57  # ENVIRONMENT.md: one epoch on 864 gold steps, 4 dev seeds per game, actions written freely
TARGET_SCORE, TARGET_WON = 0.9, 0.8


def evolver(store: Path, *args: str) -> tuple[float, str]:
    cmd = [str(Path(sys.executable).with_name("evolver")), "--store", str(store), *args]
    print("$ " + " ".join(cmd[1:]), flush=True)
    t0 = time.perf_counter()
    # Run inside the workspace: `evolver init` writes evolver.toml in the current folder, and one left
    # there (or a user's own, which init would keep and read) must not become the yardstick's config.
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=store, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - t0, done.stdout + done.stderr


def latest_eval(store: Path) -> dict:
    """The newest `evolver eval` evaluation: its program, score, success rate and per-category scores."""
    with duckdb.connect(str(store / "evolver.duckdb"), read_only=True) as db:
        run, program = db.execute("SELECT run_id, program_id FROM evaluations WHERE run_id LIKE 'eval-%' "
                                  "ORDER BY created_at DESC LIMIT 1").fetchone()
        rows = db.execute("SELECT category, avg(score), avg(CASE WHEN won THEN 1 ELSE 0 END), count(*) "
                          "FROM episodes WHERE run_id = ? GROUP BY 1 ORDER BY 1", [run]).fetchall()
    n = sum(r[3] for r in rows)
    return {"program": program, "episodes": n,
            "score": sum(r[1] * r[3] for r in rows) / n, "won": sum(r[2] * r[3] for r in rows) / n,
            "per_category": {r[0]: round(r[1], 3) for r in rows}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-category", type=int, default=4, help="test tasks per game per evaluation")
    ap.add_argument("--split", default="test")
    ap.add_argument("--store", default=None, help="workspace (default: a new temporary folder)")
    ap.add_argument("--sft", action="append", default=[], metavar="KEY=VALUE",
                    help="a plugins.sft option (repeatable), e.g. seed_bank=false, epochs=2")
    args = ap.parse_args()
    store = Path(args.store or tempfile.mkdtemp(prefix="yardstick-")).resolve()
    store.mkdir(parents=True, exist_ok=True)
    n = str(args.per_category)
    rows, total = [], 0.0
    evolver(store, "init")
    wall, _ = evolver(store, "eval", "--split", args.split, "--per-category", n)
    total += wall
    rows.append(("seed program", wall, total, latest_eval(store)))
    sets = [x for kv in args.sft for x in ("--set", f"plugins.sft.{kv}")]
    wall, out = evolver(store, "train", "--sft", *sets)
    total += wall
    rows.append(("cold-start SFT", wall, total, None))
    found = re.search(r"committed as program (\S+)", out)
    if found is None:
        raise SystemExit(f"evolver train --sft committed no program:\n{out[-3000:]}")
    program = found.group(1)
    wall, _ = evolver(store, "eval", "--split", args.split, "--per-category", n, "--program", program)
    total += wall
    rows.append((f"after SFT ({program})", wall, total, latest_eval(store)))

    print(f"\ntwx-easy {args.split}, {args.per_category} tasks per game, embedded SmolLM2-135M, "
          f"{os.cpu_count()} CPU cores; SFT options: {' '.join(args.sft) or 'defaults'}; workspace {store}")
    print("| stage | wall min | cumulative min | score | games won | per game |")
    print("|---|---|---|---|---|---|")
    for stage, wall, cum, ev in rows:
        cells = (f"{ev['score']:.3f} | {ev['won']:.0%} of {ev['episodes']} | "
                 + ", ".join(f"{k} {v:.2f}" for k, v in ev["per_category"].items())) if ev else " | | "
        print(f"| {stage} | {wall / 60:.1f} | {cum / 60:.1f} | {cells} |")
    print(f"plain one-epoch SFT (ENVIRONMENT.md, dev): {PLAIN_SFT}; target: {TARGET_SCORE} with "
          f"{TARGET_WON:.0%} of games won within 60 min")


if __name__ == "__main__":
    main()
