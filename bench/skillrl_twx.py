"""SKILLRL on twx-easy with the embedded model on CPU: at equal GRPO steps, dev and test scores of

- ``grpo``      GRPO without skills (the plain RL baseline),
- ``static``    GRPO with a static SkillBank (seeded from gold trajectories of training tasks, never evolved),
- ``evolving``  GRPO with recursive evolution (lessons from failed training rollouts after each validation),

each optionally after cold-start SFT (``--sft``: skill-conditioned gold steps for the banked conditions,
the same steps without skills for ``grpo``). Every condition runs in its own workspace under ``--store``;
the traces, bank commits and checkpoints stay there. The default teacher is the deterministic ``rules``
distiller (the 135M policy rarely writes schema-valid JSON; ``--teacher executor`` asks it anyway).

    .venv/bin/python bench/skillrl_twx.py --quick                    # minutes: is everything wired?
    .venv/bin/python bench/skillrl_twx.py --steps 20 --sft           # the experiment (hours on 2 cores)
    .venv/bin/python bench/skillrl_twx.py --conditions static,evolving --steps 10 --store /tmp/skillrl-bench
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EVOLVER_PLUGINS", "transformers,twx,grpo,skillrl")

CONDITIONS = ("grpo", "static", "evolving")


def make_run(args, label: str):
    """The condition's run in its own workspace (a context manager: ``with make_run(...) as run``)."""
    from evolver import open_run
    from evolver.config import Config

    store_dir = Path(args.store) / label
    grpo = {"steps": args.steps, "group_size": args.group, "tasks_per_step": args.prompts, "lr": args.lr,
            "beta": 0.0, "loss": "token", "max_new_tokens": args.tokens, "eval_split": "dev",
            "eval_per_category": args.dev, "eval_every": args.eval_every, "seed": args.seed,
            "per_category": args.train_per_category, "micro_batch": args.micro_batch}
    skillrl = {"teacher": args.teacher, "gold_per_category": args.gold, "top_k": 2,
               "evolve_every": 0 if label.endswith("static") else 1}
    sft = {"per_category": args.sft_per_category, "epochs": 1, "batch_size": 8, "lr": 3e-5,
           "seed_bank": not label.endswith("grpo"), "steps": args.sft_steps}
    bench = {"suite": "twx-easy", **({"games": args.games.split(",")} if args.games else {}),
             **({"max_steps": args.max_steps} if args.max_steps else {})}
    cfg = Config(store=str(store_dir), benchmark="twx", benchmark_options=bench,
                 seed_skills=["twx-experts"],  # twx's hand-written pack (opt-in), as measured
                 plugins={"grpo": grpo, "skillrl": skillrl, "sft": sft})
    return open_run(cfg, run_id=f"bench-{label}-{int(time.time())}")


def condition(args, name: str) -> dict:
    from evolver_grpo.trainer import GRPOTrainer
    from evolver_skillrl.bank import counts, load_bank
    from evolver_skillrl.sft import SkillSFTTrainer as SFTTrainer
    from evolver_skillrl.trainer import SkillRLTrainer

    label = f"{'sft-' if args.sft else ''}{name}"
    out = {"condition": label}
    with make_run(args, label) as run:
        started = time.time()
        grpo = dict(run.config.plugins["grpo"])
        if args.sft:
            sft = SFTTrainer(run, progress=lambda r: print(f"[{label}] sft step {r['step']} loss {r['loss']:.3f}",
                                                           flush=True))
            summary = sft.train()
            out["sft_samples"] = summary["samples"]
            grpo["program"] = summary["program"]  # its bank (if any) and, in this process, its trained weights
            del sft  # its optimizer state: GRPO makes its own

        def progress(row):
            print(f"[{label}] step {row['step']:>3} reward {row['reward_mean']:.3f} {row['step_s']:.0f}s", flush=True)
        if name == "grpo":
            trainer = GRPOTrainer(run, dict(grpo, skills=False), progress=progress)
        else:
            trainer = SkillRLTrainer(run, {**run.config.plugins["skillrl"], **grpo}, progress=progress)
        summary = trainer.train()
        dev = summary["evals"][-1]
        test = trainer.evaluate("test", args.test)
        bank = counts(load_bank(trainer.program.root)) if name != "grpo" else {"general": 0, "task": 0, "lesson": 0}
        out.update(dev_score=dev["score"], dev_success=dev["success"], test_score=test.score,
                   test_success=test.success, test_per_category=test.per_category, bank=bank,
                   dev_start=summary["evals"][0]["score"], program=summary["program"],
                   growth=[{k: g.get(k) for k in ("step", "general", "task", "lesson", "kept")}
                           for g in summary.get("bank_growth", [])])
    out["wall_s"] = time.time() - started
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few minutes: tiny budgets everywhere")
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--sft", action="store_true", help="cold-start SFT before GRPO in every condition")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--dev", type=int, default=4, help="dev tasks per category per validation")
    ap.add_argument("--test", type=int, default=8, help="test tasks per category at the end")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--micro-batch", type=int, default=2, help="samples per forward/backward: skills make prompts long")
    ap.add_argument("--gold", type=int, default=3, help="gold trajectories per category seeding the bank")
    ap.add_argument("--train-per-category", type=int, default=50)
    ap.add_argument("--sft-per-category", type=int, default=20)
    ap.add_argument("--sft-steps", type=int, default=None)
    ap.add_argument("--games", default=None, help="comma-separated twx-easy games (default: all six)")
    ap.add_argument("--max-steps", type=int, default=None, help="episode step limit (default: each game's own)")
    ap.add_argument("--teacher", default="rules", help="rules, or a role name (executor = the policy)")
    ap.add_argument("--store", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.quick:
        args.steps, args.eval_every, args.dev, args.test, args.group, args.prompts = 2, 1, 1, 1, 2, 2
        args.gold, args.train_per_category, args.sft_per_category, args.sft_steps = 1, 4, 2, 4
        args.games = args.games or "twc,simonsays"  # evaluation in choice mode dominates: two short games
    args.store = args.store or tempfile.mkdtemp(prefix="bench-skillrl-")
    names = [c.strip() for c in args.conditions.split(",") if c.strip()]
    bad = [c for c in names if c not in CONDITIONS]
    if bad:
        raise SystemExit(f"unknown condition(s) {bad}; choose from {', '.join(CONDITIONS)}")
    started = time.time()
    rows = [condition(args, c) for c in names]
    print(f"\ntwx-easy ({args.games or 'all games'}), embedded SmolLM2-135M on CPU: {args.steps} GRPO steps "
          f"(G={args.group}, {args.prompts} tasks/step, lr {args.lr})"
          f"{', after cold-start SFT' if args.sft else ''}; teacher {args.teacher}; "
          f"dev {args.dev}/category per validation, test {args.test}/category; wall {time.time() - started:.0f}s; "
          f"workspaces in {args.store}\n")
    print("| condition | dev at start | dev score | dev success | test score | test success | bank g/t/l | wall |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = r["bank"]
        print(f"| {r['condition']} | {r['dev_start']:.3f} | {r['dev_score']:.3f} | {r['dev_success']:.3f} | "
              f"{r['test_score']:.3f} | {r['test_success']:.3f} | {b['general']}/{b['task']}/{b['lesson']} | "
              f"{r['wall_s']:.0f}s |")
    print("\nRESULT " + json.dumps(rows))


if __name__ == "__main__":
    main()
