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

``--config FILE`` measures a whole pipeline instead: ``evolver --config FILE run`` (the loop with
its proposers, its own final test evaluation and best-of-N baseline), timed, then the ablation on the
same test tasks: every program on the best program's lineage (seed, then each component that
changed it: imitation, expert iteration, GRPO, skills, harness edits), and the best without its
skills (``evolver eval --skills none``) and, with ``--pack``, with the benchmark's hand-written pack
instead (``--skills pack``, a labelled comparison), with the normalised gains. Example: ``--config examples/twx-full.toml
--per-category 8``; a run's episodes are cached, so programs it already played on test cost nothing.
``--existing`` measures the ablation of the newest finished run in ``--store`` without running it again.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from evolver import DB_FILE

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
    """The newest `evolver eval` evaluation: its program, score, success rate and per-category scores. Read
    from the evaluation row, not the run's episodes: episodes a run already played come from the cache
    and are not stored again under the eval's run."""
    with duckdb.connect(str(store / DB_FILE), read_only=True) as db:
        program, score, won, n, per_category = db.execute(
            "SELECT program_id, score, success, n, per_category FROM evaluations WHERE run_id LIKE 'eval-%' "
            "ORDER BY created_at DESC LIMIT 1").fetchone()
    per_category = json.loads(per_category) if isinstance(per_category, str) else per_category
    return {"program": program, "episodes": n, "score": score, "won": won,
            "per_category": {k: round(float(v), 3) for k, v in sorted((per_category or {}).items())}}


def lineage(store: Path, run_id: str, program: str) -> list[dict]:
    """The programs from the seed to ``program`` (seed first), with operator and hypothesis."""
    with duckdb.connect(str(store / DB_FILE), read_only=True) as db:
        rows = db.execute("SELECT program_id, parent_id, operator FROM programs WHERE run_id = ?", [run_id]).fetchall()
        props = dict(db.execute("SELECT candidate_id, hypothesis FROM proposals WHERE run_id = ?", [run_id]).fetchall())
    parent = {pid: (par, op) for pid, par, op in rows}
    chain, pid = [], program
    while pid and pid in parent and pid not in [c["program"] for c in chain]:
        chain.append({"program": pid, "operator": parent[pid][1] or "seed", "hypothesis": props.get(pid, "")})
        pid = parent[pid][0]
    return chain[::-1]


def pipeline(args, store: Path) -> None:
    """``evolver --config FILE run``, timed, then the ablation along the best program's lineage."""
    config = Path(args.config).resolve()
    n = str(args.per_category)
    sets = [x for kv in args.set for x in ("--set", kv)]
    common = ["--config", str(config), *sets, "--set", f"loop.test_per_category={args.per_category}"]
    wall = 0.0
    if not args.existing:
        wall, _ = evolver(store, *common, "run")
    with duckdb.connect(str(store / DB_FILE), read_only=True) as db:
        run_id, summary = db.execute("SELECT run_id, summary FROM runs WHERE run_id NOT LIKE 'eval-%' AND status = "
                                     "'finished' AND summary LIKE '%best_vs_seed%' ORDER BY created_at DESC "
                                     "LIMIT 1").fetchone() or (None, None)
    if run_id is None:
        raise SystemExit(f"no finished `evolver run` with a final test evaluation in {store}")
    summary = json.loads(summary)
    best, total = summary["best"], wall
    rows = [("evolver run (the whole pipeline)" + (" (measured before)" if args.existing else ""), wall, total, None)]
    for step in lineage(store, run_id, best):
        t, _ = evolver(store, *common, "eval", "--split", args.split, "--per-category", n, "--program", step["program"])
        total += t
        rows.append((f"{step['operator']}: {step['program']}", t, total, latest_eval(store)))
    t, _ = evolver(store, *common, "eval", "--split", args.split, "--per-category", n, "--program", best,
                   "--skills", "none")
    total += t
    none = latest_eval(store)
    rows.append((f"best without its skills: {best}", t, total, none))
    pack = None
    if args.pack:  # the same weights with the benchmark's hand-written pack as its skills: a labelled comparison
        t, _ = evolver(store, *common, "eval", "--split", args.split, "--per-category", n, "--program", best,
                       "--skills", "pack")
        total += t
        pack = latest_eval(store)
        rows.append((f"best with the hand-written pack instead (not a headline): {best}", t, total, pack))
    print(f"\n{config.name}: twx {args.split}, {args.per_category} tasks per game, embedded SmolLM2-135M, "
          f"{os.cpu_count()} CPU cores; run {run_id}; workspace {store}")
    table(rows)
    best_eval = next((ev for stage, _, _, ev in rows if stage.endswith(f": {best}") and ev), None)
    for label, ev in (("mined/evolved skills", best_eval), ("hand-written pack", pack)):
        if ev and none and none["score"] < 1:
            g = (ev["score"] - none["score"]) / (1 - none["score"])
            print(f"{label} vs no skills (same weights): {ev['score'] - none['score']:+.3f} absolute, "
                  f"normalised gain g = {g:+.3f}")
    paired = summary.get("paired", {})
    for name, p in paired.items():
        print(f"{name}: {p['diff']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}] on {p['n']} tasks")
    if "best_of_n" in summary:
        b = summary["best_of_n"]
        print(f"best-of-{b['n']} baseline (seed sampled at T={b['temperature']}): test {b['test']['score']:.3f}")
    print(f"target: {TARGET_SCORE} with {TARGET_WON:.0%} of games won within 60 min (the run's wall: {wall / 60:.1f} min)")


def table(rows) -> None:
    print("| stage | wall min | cumulative min | score | games won | per game |")
    print("|---|---|---|---|---|---|")
    for stage, wall, cum, ev in rows:
        cells = (f"{ev['score']:.3f} | {ev['won']:.0%} of {ev['episodes']} | "
                 + ", ".join(f"{k} {v:.2f}" for k, v in ev["per_category"].items())) if ev else " | | "
        print(f"| {stage} | {wall / 60:.1f} | {cum / 60:.1f} | {cells} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-category", type=int, default=4, help="test tasks per game per evaluation")
    ap.add_argument("--split", default="test")
    ap.add_argument("--store", default=None, help="workspace (default: a new temporary folder)")
    ap.add_argument("--sft", action="append", default=[], metavar="KEY=VALUE",
                    help="a plugins.sft option (repeatable), e.g. seed_bank=false, epochs=2")
    ap.add_argument("--config", default=None, help="measure `evolver --config FILE run` and its ablation instead")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="with --config: a config override for every command (repeatable)")
    ap.add_argument("--pack", action="store_true",
                    help="also play the best program's weights with the benchmark's hand-written skill pack "
                         "(`evolver eval --skills pack`), labelled as a comparison")
    ap.add_argument("--existing", action="store_true",
                    help="with --config and --store: skip the run, measure the ablation of the newest finished one")
    args = ap.parse_args()
    if args.existing and not (args.config and args.store):
        ap.error("--existing needs --config and --store (the workspace of a finished run)")
    store = Path(args.store or tempfile.mkdtemp(prefix="yardstick-")).resolve()
    store.mkdir(parents=True, exist_ok=True)
    if args.config:
        return pipeline(args, store)
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
    table(rows)
    print(f"plain one-epoch SFT (ENVIRONMENT.md, dev): {PLAIN_SFT}; target: {TARGET_SCORE} with "
          f"{TARGET_WON:.0%} of games won within 60 min")


if __name__ == "__main__":
    main()
