"""A few GRPO steps with the vLLM rollout engine on a GPU (called by bench/gpu_check.sh): per-step
time split (rollout, log-probs, update, weight sync) and rollout tokens/s.

    python bench/grpo_gpu_steps.py [--steps 3] [--group 8] [--prompts 4] [--tokens 128]
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EVOLVER_PLUGINS", "reasoning-gym,grpo")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--engine", default="vllm")
    args = ap.parse_args()
    from evolver.config import Config
    from evolver.loop import ensure_seed
    from evolver.programs import ProgramRepo
    from evolver.run import Run
    from evolver.store import Store
    from evolver_grpo.trainer import GRPOTrainer

    tmp = Path(tempfile.mkdtemp(prefix="gpu-grpo-"))
    cfg = Config(store=str(tmp), benchmark="reasoning-gym", benchmark_options={"datasets": ["gsm_symbolic"], "size": 64},
                 roles={"executor": {"backend": args.engine, "options": {"dtype": "bf16"}}},
                 plugins={"grpo": {"group_size": args.group, "tasks_per_step": args.prompts,
                                   "max_new_tokens": args.tokens, "autocast": True, "micro_batch": 32}})
    run = Run(cfg, Store(tmp / "evolver.duckdb"), ProgramRepo(tmp))
    run.record()
    ensure_seed(run)
    trainer = GRPOTrainer(run, run.config.plugins["grpo"])
    trainer.setup()
    print("| step | step s | rollout s | log-probs s | update s | sync s | completion tokens | rollout tok/s | reward |")
    print("|---|---|---|---|---|---|---|---|---|")
    for step in range(args.steps):
        r = trainer.step(step)
        toks = r["response_len"] * r["samples"]
        print(f"| {r['step']} | {r['step_s']:.2f} | {r['rollout_s']:.2f} | {r['logprob_s']:.2f} | {r['update_s']:.2f} "
              f"| {r['sync_s']:.2f} | {toks:.0f} | {toks / max(r['rollout_s'], 1e-9):.0f} | {r['reward_mean']:.3f} |")
    run.close()


if __name__ == "__main__":
    main()
