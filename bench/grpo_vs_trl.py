"""GRPO step time and peak memory: evolver's trainer vs TRL's GRPOTrainer, same tiny configuration,
side by side in one run (each side in its own fresh process, so peak RSS is its own).

Same model (the embedded SmolLM2-135M), same prompts (reasoning-gym basic_arithmetic rendered by
the seed harness into chat messages), same group size, completion budget, loss ("sequence" =
TRL's "grpo"), β, learning rate, fp32, no gradient checkpointing, and the same reward (the
generator's scorer). The seed harness's stop-at-newline is switched off for this bench so both
sides generate until EOS or the budget.

    .venv/bin/python bench/grpo_vs_trl.py [--steps 4] [--group 4] [--prompts 2] [--tokens 32]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("EVOLVER_PLUGINS", "transformers,reasoning-gym,grpo")


@contextmanager
def setup_run(tmp: Path, args):
    """Yields (run, seed program) in a workspace at ``tmp``, the seed's stop-at-newline switched off."""
    from evolver import open_run
    from evolver.config import Config

    cfg = Config(store=str(tmp), benchmark="reasoning-gym",
                 benchmark_options={"datasets": ["basic_arithmetic"], "size": 64},
                 plugins={"grpo": {"steps": args.steps + 1, "group_size": args.group, "tasks_per_step": args.prompts,
                                   "max_new_tokens": args.tokens, "beta": args.beta, "lr": args.lr,
                                   "autocast": False, "loss": "sequence", "temperature": 1.0, "micro_batch": 64}})
    with open_run(cfg) as run:
        seed = run.repo.checkout("seed")
        harness = Path(seed.root) / "harness" / "harness.py"
        harness.write_text(harness.read_text().replace('stop=["\\n"]', "stop=None"))
        yield run, run.repo.checkout("seed")


def ours(args) -> dict:
    from evolver_grpo.trainer import GRPOTrainer

    with setup_run(Path(tempfile.mkdtemp(prefix="bench-grpo-")), args) as (run, _):
        trainer = GRPOTrainer(run, run.config.plugins["grpo"])
        trainer.setup()
        times, lens = [], []
        for step in range(args.steps + 1):
            row = trainer.step(step)
            if step:  # the first step warms up
                times.append(row["step_s"])
                lens.append(row["response_len"])
    return {"step_s": statistics.median(times), "response_len": statistics.mean(lens)}


def trl(args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from evolver_transformers.embedded import embedded_model_dir
    from evolver.harness import make_harness

    with setup_run(Path(tempfile.mkdtemp(prefix="bench-trl-")), args) as (run, program):
        ctx = run.context(program)
        harness = make_harness(ctx)
        tasks = run.benchmark.tasks("train")
        rows = []
        for t in tasks:
            env = run.benchmark.env(t)
            req = harness.next_call(harness.start(t, env.reset()), env.reset())
            rows.append({"prompt": [{"role": m.role, "content": m.content} for m in req.messages],
                         "task_index": len(rows)})
        by_index = {i: t for i, t in enumerate(tasks)}

        def reward(completions, task_index, **_):
            out = []
            for c, i in zip(completions, task_index):
                text = c[0]["content"] if isinstance(c, list) else c
                out.append(run.benchmark.env(by_index[i]).step(text).score)
            return out

        times, lens = [], []

        class Timer(TrainerCallback):
            def on_step_begin(self, *a, **k):
                self.t0 = time.perf_counter()

            def on_step_end(self, *a, **k):
                times.append(time.perf_counter() - self.t0)

            def on_log(self, _args, state, control, logs=None, **k):
                if logs and "completions/mean_length" in logs:
                    lens.append(logs["completions/mean_length"])

        folder = str(embedded_model_dir())
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(folder)
        cfg = GRPOConfig(output_dir=tempfile.mkdtemp(prefix="trl-out-"),
                         per_device_train_batch_size=args.group * args.prompts, num_generations=args.group,
                         max_completion_length=args.tokens, learning_rate=args.lr,
                         beta=args.beta, loss_type="grpo", max_steps=args.steps + 1, logging_steps=1, report_to="none",
                         use_cpu=True, bf16=False, gradient_checkpointing=False, save_strategy="no", temperature=1.0,
                         num_iterations=1, seed=0, dataloader_num_workers=0)
        trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=reward, args=cfg,
                              train_dataset=Dataset.from_list(rows))
        trainer.add_callback(Timer())
        trainer.train()
    return {"step_s": statistics.median(times[1:]), "response_len": statistics.mean(lens[1:]) if len(lens) > 1 else 0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", choices=["ours", "trl"])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--beta", type=float, default=0.04)
    ap.add_argument("--lr", type=float, default=1e-6)
    args = ap.parse_args()
    if args.side:
        out = (ours if args.side == "ours" else trl)(args)
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("RESULT " + json.dumps(out))
        return
    results = {}
    for side in ("ours", "trl"):
        cmd = [sys.executable, __file__, "--side", side] + [f"--{k}={v}" for k, v in vars(args).items() if k != "side"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            sys.exit(f"{side} failed:\n{done.stderr[-3000:]}")
        results[side] = json.loads(line[7:])
    print(f"GRPO step, SmolLM2-135M fp32, G={args.group}, {args.prompts} prompts/step, <= {args.tokens} new tokens, "
          f"beta={args.beta}, loss grpo/sequence; median of {args.steps} steps after 1 warm-up\n")
    print("| side | step s | mean completion tokens | peak RSS MB |\n|---|---|---|---|")
    for side, r in results.items():
        print(f"| {side} | {r['step_s']:.2f} | {r['response_len']:.1f} | {r['peak_rss_mb']:.0f} |")
    o, t = results["ours"], results["trl"]
    print(f"\nstep time ratio ours/trl: {o['step_s'] / t['step_s']:.2f}   peak memory ratio: "
          f"{o['peak_rss_mb'] / t['peak_rss_mb']:.2f}")


if __name__ == "__main__":
    main()
