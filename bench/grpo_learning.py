"""Does GRPO learn? The embedded model trained on an easy single-turn reasoning-gym task: mean reward
on the training rollouts and the greedy score on a held-out dev split, before and during training.
With ``--benchmark twx`` it trains on twx-easy instead, starting from ``--program`` (its skills, its
harness and, when it is a trained program, its checkpoint: pass ``--store`` with it), and with
``--ablate-skills`` trains once more without the program's skills at equal steps.

    .venv/bin/python bench/grpo_learning.py [--steps 50] [--eval-every 10]
    .venv/bin/python bench/grpo_learning.py --benchmark twx --steps 10 --program best --store store --ablate-skills
    .venv/bin/python bench/grpo_learning.py --benchmark twx --program p0001 --store S --method grpo,tree,ppo,distill

``--method`` trains the other RL methods on the same task at equal steps and rollouts a step:
``ppo`` (a critic's value head and GAE; ``--group`` x ``--prompts`` single rollouts a step),
``distill`` (on-policy self-distillation, the teacher given the gold answer as privileged context;
``--prompts`` tasks x ``--group`` samples a step) and ``tree`` (Tree-GRPO; with one model call per
episode there is nothing to branch, so on reasoning-gym it samples as GRPO does: a check, not a race;
on twx it grows ``--group`` / (N + 1) trees of one round of N = ``--tree-nodes`` branches, the same
number of rollouts a task as GRPO). Several, comma-separated, run one after another; each prints its
rollouts and wall time, so methods compare at equal rollouts and at equal time.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EVOLVER_PLUGINS", "transformers,reasoning-gym,twx,grpo")

# Sums of two one-digit numbers: the 135M model gets ~20% of its sampled answers right, so groups
# have reward spread; harder generators score 0 for every sample (measured: chain_sum with up to 2
# digits, leg_counting, simple_equations, count_primes, ...), which leaves GRPO nothing to learn.
# The space is 100 questions: train draws 40 of them, and dev/test keep only questions train lacks.
EASY = {"datasets": ["basic_arithmetic"], "size": 200, "split_sizes": {"train": 40},
        "configs": {"basic_arithmetic": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1,
                                         "operators": ["+"], "allow_parentheses": False, "allow_negation": False}}}


def trainer_for(method: str, run, grpo: dict, progress, tree_nodes: int = 1, multi_step: bool = False):
    """The trainer of ``method`` with the GRPO options mapped onto its own, at equal rollouts a step."""
    if method == "ppo":
        from evolver_grpo.ppo import PPOTrainer
        opts = {k: v for k, v in grpo.items() if k not in ("estimator", "group_size", "tasks_per_step")}
        return PPOTrainer(run, {**opts, "group_size": 1, "tasks_per_step": grpo["group_size"] * grpo["tasks_per_step"]},
                          progress=progress)
    if method == "distill":
        from evolver_grpo.distill import DistillTrainer
        keep = ("steps", "lr", "max_new_tokens", "program", "eval_split", "eval_per_category", "seed")  # dev: first, last
        return DistillTrainer(run, {**{k: grpo[k] for k in keep}, "privileged": "gold",
                                    "tasks_per_step": grpo["tasks_per_step"], "samples_per_task": grpo["group_size"]},
                              progress=progress)
    from evolver_grpo.trainer import GRPOTrainer
    if method == "tree":
        trees = max(1, grpo["group_size"] // (tree_nodes + 1)) if multi_step else grpo["group_size"]
        grpo = {**grpo, "sampling": "tree", "group_size": trees, "tree_nodes": tree_nodes, "tree_rounds": 1}
    return GRPOTrainer(run, grpo, progress=progress)


def start_from(cfg, program: str, label: str):
    """``cfg`` with the executor loaded from ``program``'s checkpoint when it is a trained program, as
    `evolver eval` plays it."""
    from evolver import ProgramRepo
    from evolver.cli import program_checkpoint

    start = program_checkpoint(ProgramRepo(Path(cfg.store)), program, cfg)
    if start:
        cfg.roles["executor"].model = start
        print(f"[{label}] model: {start}", flush=True)
    return cfg


def train(args, skills: bool, label: str, method: str = "grpo") -> tuple[list[dict], dict]:
    from evolver import open_run
    from evolver.config import Config

    store_dir = Path(args.store) if args.store else Path(tempfile.mkdtemp(prefix="bench-learn-"))
    if args.benchmark == "twx":
        bench, options = "twx", {"suite": "twx-easy", **({"max_steps": args.max_steps} if args.max_steps else {})}
    else:
        bench, options = "reasoning-gym", EASY
    grpo = {"steps": args.steps, "group_size": args.group, "tasks_per_step": args.prompts, "lr": args.lr,
            "beta": args.beta, "max_new_tokens": args.tokens, "program": args.program, "skills": skills,
            "estimator": args.estimator, "loss": args.loss, "eval_split": "dev", "eval_per_category": args.dev,
            "eval_every": args.eval_every, "seed": args.seed, "rewards": args.rewards.split(",") if args.rewards else None}
    cfg = start_from(Config(store=str(store_dir), benchmark=bench, benchmark_options=options,
                            seed_skills=["twx-experts"] if bench == "twx" else None,  # hand-written pack, as measured
                            plugins={"grpo": grpo}), args.program, label)
    began = time.time()
    with open_run(cfg, run_id=f"learn-{label}-{int(time.time())}") as run:
        splits = {sp: len(run.benchmark.tasks(sp)) for sp in ("train", "dev")}
        held = len(run.benchmark.tasks("dev", per_category=args.dev))
        print(f"[{label}] tasks: train {splits['train']}, dev {splits['dev']} (evaluating {held} dev tasks)",
              flush=True)
        curve = []

        def progress(row):
            reward = row.get("reward_mean", row.get("score_mean", 0.0))
            print(f"[{label}] step {row['step']:>3} reward {reward:.3f} "
                  f"len {row.get('response_len', 0):.1f} {row['step_s']:.1f}s", flush=True)
        trainer = trainer_for(method, run, grpo, progress, args.tree_nodes, args.benchmark == "twx")
        summary = trainer.train()
    rollouts = sum(r.get("episodes", 0) for r in summary["history"])  # a tree's branches count as rollouts
    rewards = {r["step"]: r.get("reward_mean", r.get("score_mean")) for r in summary["history"]}
    for ev in summary["evals"]:
        s = ev["step"]
        window = [rewards[k] for k in range(max(1, s - args.eval_every + 1), s + 1) if k in rewards]
        curve.append({"step": s, "dev": ev["score"], "train_reward": sum(window) / len(window) if window else None})
    return curve, {"wall_s": round(time.time() - began), "rollouts": rollouts}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--benchmark", choices=["reasoning-gym", "twx"], default="reasoning-gym")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--dev", type=int, default=60, help="dev tasks per category for the held-out score")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--beta", type=float, default=0.0)
    ap.add_argument("--estimator", default="grpo")
    ap.add_argument("--loss", default="token")
    ap.add_argument("--max-steps", type=int, default=8, help="twx: moves an episode (0: each game's own limit)")
    ap.add_argument("--program", default="seed")
    ap.add_argument("--store", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rewards", default="score", help="named rewards to train on, comma-separated ('' = all)")
    ap.add_argument("--method", default="grpo", help="grpo, ppo, distill, tree; several comma-separated")
    ap.add_argument("--tree-nodes", type=int, default=1, help="tree: branches a round (N), on multi-step tasks")
    ap.add_argument("--ablate-skills", action="store_true", help="each method once more without the skills")
    args = ap.parse_args()
    started = time.time()
    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    runs, costs = {}, {}
    for m in methods:  # each curve printed as it ends: a later one may fail
        for skills in (True, False) if args.ablate_skills else (True,):
            name = m if skills else f"{m} without skills"
            runs[name], costs[name] = train(args, skills, name.replace(" ", "-"), m)
            print(f"CURVE {name} " + json.dumps({"curve": runs[name], **costs[name]}), flush=True)
    print(f"\n{args.benchmark}: {args.steps} steps, G={args.group}, {args.prompts} prompts/step, lr {args.lr}, "
          f"{args.estimator}/{args.loss}; wall {time.time() - started:.0f}s\n")
    print("| run | step | mean train reward (last window) | dev score (greedy) | rollouts | wall |\n"
          "|---|---|---|---|---|---|")
    for name, curve in runs.items():
        for c in curve:
            tr = "-" if c["train_reward"] is None else f"{c['train_reward']:.3f}"
            print(f"| {name} | {c['step']} | {tr} | {c['dev']:.3f} | {costs[name]['rollouts']} "
                  f"| {costs[name]['wall_s']} s |")
    print("\nRESULT " + json.dumps(runs))


if __name__ == "__main__":
    main()
