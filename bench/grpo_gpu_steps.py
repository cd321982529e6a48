"""A few GRPO steps on a GPU (called by bench/gpu_check.sh): per-step time split (rollout,
log-probs, update, weight sync) and rollout tokens/s, on the zero-dependency ``basic`` benchmark's
single-turn arithmetic tasks. The engine is vLLM when it is installed, else transformers on the GPU.

    python bench/grpo_gpu_steps.py [--steps 3] [--group 8] [--prompts 4] [--tokens 128] [--engine auto]
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EVOLVER_PLUGINS", "transformers,vllm")  # the engines; the trainer is imported directly


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--engine", default="auto", help="vllm, transformers or auto (vllm when importable)")
    ap.add_argument("--lora", action="store_true")
    ap.add_argument("--dtype", default="bf16", help="engine dtype: bf16 (autocast) or fp32")
    ap.add_argument("--decode", default="auto", help="transformers engine decode path: auto (CUDA graphs on a "
                    "GPU), graphs, static, loop")
    ap.add_argument("--rollout-batch", type=int, default=0, help="episodes per lockstep (0: the whole step)")
    args = ap.parse_args()
    if args.engine == "auto":
        import importlib.util

        args.engine = "vllm" if importlib.util.find_spec("vllm") else "transformers"
    from evolver import open_run
    from evolver.config import Config
    from evolver_grpo.trainer import GRPOTrainer

    tmp = Path(tempfile.mkdtemp(prefix="gpu-grpo-"))
    cfg = Config(store=str(tmp), benchmark="basic", benchmark_options={"categories": ["arithmetic"]},
                 roles={"executor": {"backend": args.engine, "options": {"dtype": args.dtype, "max_batch": 256,
                                                                 "decode": args.decode}}},
                 plugins={"grpo": {"group_size": args.group, "tasks_per_step": args.prompts, "lora": args.lora,
                                   "max_new_tokens": args.tokens, "autocast": args.dtype == "bf16", "micro_batch": 32,
                                   "rollout_batch": args.rollout_batch}})
    with open_run(cfg) as run:
        trainer = GRPOTrainer(run, run.config.plugins["grpo"])
        trainer.setup()
        import torch

        dev = next(trainer.model.parameters()).device
        print(f"engine {args.engine}, learner on {dev}, G={args.group}, {args.prompts} prompts/step, "
              f"<= {args.tokens} new tokens, lora={args.lora}, {args.dtype}, "
              f"rollout batch {args.rollout_batch or args.group * args.prompts}")
        print("| step | step s | rollout s | log-probs s | update s | sync s | completion tokens | rollout tok/s "
              "| reward |")
        print("|---|---|---|---|---|---|---|---|---|")
        for step in range(args.steps):
            r = trainer.step(step)
            toks = r["response_len"] * r["samples"]
            print(f"| {r['step']} | {r['step_s']:.2f} | {r['rollout_s']:.2f} | {r['logprob_s']:.2f} "
                  f"| {r['update_s']:.2f} | {r['sync_s']:.2f} | {toks:.0f} | {toks / max(r['rollout_s'], 1e-9):.0f} "
                  f"| {r['reward_mean']:.3f} |")
        backend = trainer.engine.backend if trainer.engine is not None else None
        if hasattr(backend, "decode_path"):
            print(f"rollouts decoded by: {backend.decode_path}"
                  + (f" ({backend.decode_error})" if backend.decode_error else "")
                  + f"; graph captures {backend.timing.get('graph_captures', 0)}")
        if dev.type == "cuda":
            print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
