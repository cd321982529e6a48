"""Does DPO learn from the trace store? The same tiny task as ``bench/grpo_learning.py`` (one-digit sums
from reasoning-gym, the embedded model): the seed program's answers to the training questions are
sampled ``--group`` times each at temperature 1 and stored as ordinary episodes; the preference plugin
mines them into pairs (a right and a wrong answer to one question) and trains DPO (or Step-DPO) on
them, offline; the greedy dev score is measured before, every ``--eval-every`` steps and after.

    .venv/bin/python bench/dpo_learning.py [--steps 20] [--eval-every 10] [--trainer step-dpo]
    .venv/bin/python bench/dpo_learning.py --benchmark twx --program p0001 --store S --train 2 --group 3

With ``--benchmark twx`` the sampling policy is ``--program`` (its harness, its skills and, for a trained
program, its checkpoint: the GRPO comparison's start), playing ``--train`` training tasks per game.

Unlike GRPO, the data is collected once by the starting policy and never again: the cost is one
sampling pass plus cheap offline steps, and what it can learn is bounded by what those samples hold.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EVOLVER_PLUGINS", "transformers,reasoning-gym,twx,grpo,preference")

from grpo_learning import EASY, start_from  # noqa: E402  (the GRPO curve's task, exactly)


def sample(run, args) -> tuple[int, float]:
    """``--group`` sampled answers of the seed program to every training question, stored; (episodes, mean score)."""
    from evolver import evaluate_many
    from evolver_training.engines import RolloutBackend, make_engine

    engine = make_engine(run)
    ctx = run.context(run.repo.checkout(args.program))
    tasks = run.benchmark.tasks("train", per_category=args.train)
    sampler = RolloutBackend(engine.backend, temperature=1.0, max_tokens=args.tokens, seed=args.seed)
    sampler.reseed(args.seed * 7919)
    per_job = evaluate_many([(ctx, tasks, args.seed * 1000 + g) for g in range(args.group)], run.benchmark, sampler,
                            store=run.store, run=run, purpose="sample", use_cache=False)
    eps = [e for job in per_job for e in job]
    return len(eps), sum(e.score for e in eps) / max(1, len(eps))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", choices=["dpo", "step-dpo"], default="dpo")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--dev", type=int, default=60, help="dev tasks per category for the held-out score")
    ap.add_argument("--group", type=int, default=8, help="sampled answers per training question")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--pairs-per-task", type=int, default=4)
    ap.add_argument("--store", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--benchmark", choices=["reasoning-gym", "twx"], default="reasoning-gym")
    ap.add_argument("--program", default="seed", help="the sampling policy and the program DPO trains")
    ap.add_argument("--train", type=int, default=None, help="training tasks per category (default: all)")
    ap.add_argument("--max-steps", type=int, default=0, help="twx: moves an episode (0: each game's own limit)")
    args = ap.parse_args()

    from evolver import open_run
    from evolver.config import Config
    from evolver_preference.trainer import DPOTrainer, StepDPOTrainer

    started = time.time()
    store_dir = Path(args.store) if args.store else Path(tempfile.mkdtemp(prefix="bench-dpo-"))
    options = {"steps": args.steps, "lr": args.lr, "beta": args.beta, "batch_size": args.batch,
               "max_pairs_per_task": args.pairs_per_task, "eval_split": "dev", "eval_per_category": args.dev,
               "eval_every": args.eval_every, "seed": args.seed, "program": args.program}
    bench, bench_options = ("reasoning-gym", EASY) if args.benchmark == "reasoning-gym" else (
        "twx", {"suite": "twx-easy", **({"max_steps": args.max_steps} if args.max_steps else {})})
    cfg = Config(store=str(store_dir), benchmark=bench, benchmark_options=bench_options,
                 seed_skills=["twx-experts"] if bench == "twx" else None,  # twx's hand-written pack, as measured
                 plugins={args.trainer: options})
    cfg = start_from(cfg, args.program, args.trainer)  # a trained program's weights sample and train
    with open_run(cfg, run_id=f"dpo-learn-{int(time.time())}") as run:
        t0 = time.time()
        n, mean = sample(run, args)
        sample_s = time.time() - t0
        print(f"sampled {n} training episodes (G={args.group}) in {sample_s:.0f}s: mean reward {mean:.3f}", flush=True)
        options["runs"] = [run.id]

        def progress(row):
            print(f"step {row['step']:>3} loss {row['loss']:.4f} acc {row['reward_acc']:.2f} "
                  f"margin {row['margin']:+.4f} {row['step_s']:.1f}s", flush=True)
        cls = DPOTrainer if args.trainer == "dpo" else StepDPOTrainer
        t0 = time.time()
        summary = cls(run, options, progress=progress).train()
        train_s = time.time() - t0
    history = {r["step"]: r for r in summary["history"]}
    print(f"\n{args.trainer}: {summary['pairs']} pairs from {n} sampled episodes (mean reward {mean:.3f}), "
          f"{args.steps} steps, batch {args.batch}, lr {args.lr}, beta {args.beta}; sampling {sample_s:.0f}s, "
          f"training + evals {train_s:.0f}s, wall {time.time() - started:.0f}s\n")
    print("| step | loss | reward accuracy | margin | dev score (greedy) |\n|---|---|---|---|---|")
    for ev in summary["evals"]:
        row = history.get(ev["step"], {})
        cells = [f"{row[k]:.3f}" if k in row else "-" for k in ("loss", "reward_acc", "margin")]
        print(f"| {ev['step']} | {' | '.join(cells)} | {ev['score']:.3f} |")
    print("\nRESULT " + json.dumps({"pairs": summary["pairs"], "sampled": n, "sample_reward": mean,
                                    "evals": [{"step": e["step"], "dev": e["score"]} for e in summary["evals"]],
                                    "history": summary["history"]}))


if __name__ == "__main__":
    main()
