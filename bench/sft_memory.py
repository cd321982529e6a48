"""Cold-start SFT: step time and peak memory per ``micro_batch`` (samples per forward/backward), side by
side on the same batch, each setting in its own fresh process so its peak RSS is its own.

The batch is the ``--batch`` longest SFT samples that ``evolver train --sft`` builds from twx-easy
gold trajectories (the step that sets an epoch's peak). ``micro_batch`` = ``--batch`` is the
one-forward step a user would write first (and this trainer's behaviour before micro-batches).

    .venv/bin/python bench/sft_memory.py [--batch 8] [--micro 8,4,2,1] [--steps 3]
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build_samples(out: Path, per_category: int) -> dict:
    """The SFT trainer's own samples (gold replayed through the seed harness, skills seeded)."""
    from evolver import open_run
    from evolver.config import Config
    from evolver_skillrl.sft import SkillSFTTrainer as SFTTrainer

    tmp = Path(tempfile.mkdtemp(prefix="evolver-bench-"))
    cfg = Config(store=str(tmp), benchmark_options={"suite": "twx-easy"},
                 seed_skills=["twx-experts"])  # twx's hand-written pack (opt-in), as measured
    with open_run(cfg) as run:
        trainer = SFTTrainer(run, {"per_category": per_category})
        trainer.setup()
        samples = [{"prompt": s.prompt_ids, "completion": s.completion_ids} for s in trainer.samples]
        out.write_text(json.dumps(samples))
    return {"samples": len(samples), "max_prompt": max(len(s["prompt"]) for s in samples)}


def child(path: Path, micro: int, batch: int, steps: int) -> None:
    import torch

    from evolver_transformers.backend import TransformersBackend
    from evolver_training.options import load_sft
    from evolver_training.sft import SFTSample, SFTTrainer

    samples = [SFTSample(s["prompt"], s["completion"], "") for s in json.loads(path.read_text())]
    longest = sorted(samples, key=lambda s: -len(s.prompt_ids))[:batch]
    backend = TransformersBackend()
    trainer = SFTTrainer.__new__(SFTTrainer)  # the trainer's step alone: no run, no data preparation
    trainer.cfg = load_sft({"micro_batch": micro, "batch_size": batch})
    trainer.model, trainer.history, trainer.progress = backend.hf_model, [], lambda row: None
    from evolver_training import Optimiser, Parallel

    trainer.par = Parallel.from_env(trainer.cfg.parallel)
    trainer.opt = Optimiser(trainer.model.parameters(), lr=trainer.cfg.lr, max_grad_norm=trainer.cfg.max_grad_norm,
                            clip=trainer.par.clip_grad_norm, total=steps)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for n in range(steps):
        t0 = time.perf_counter()
        trainer.step(n, longest)
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"step_s": statistics.median(times[1:] or times), "peak_mb": peak / 1024,
                      "train_mb": (peak - before) / 1024, "loss": trainer.history[-1]["loss"],
                      "tokens": sum(len(s.prompt_ids) + len(s.completion_ids) for s in longest)}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--micro", default="8,4,2,1")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--per-category", type=int, default=4)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(Path(args.child[0]), int(args.child[1]), args.batch, args.steps)
    path = Path(tempfile.mkdtemp(prefix="evolver-bench-")) / "samples.json"
    info = build_samples(path, args.per_category)
    rows = []
    for micro in [int(m) for m in args.micro.split(",")]:
        out = subprocess.run([sys.executable, __file__, "--child", str(path), str(micro), "--batch", str(args.batch),
                              "--steps", str(args.steps)], capture_output=True, text=True, check=True)
        rows.append((micro, json.loads(out.stdout.strip().splitlines()[-1])))
    first = rows[0][1]
    import torch

    from evolver_transformers.precision import use_autocast
    print(f"SFT step on the {args.batch} longest of {info['samples']} samples ({first['tokens']} tokens, "
          f"prompts up to {info['max_prompt']}), SmolLM2-135M, "
          f"{'bf16 autocast' if use_autocast(None, torch.device('cpu')) else 'fp32'}, CPU; median of {args.steps} steps")
    print(f"{'micro_batch':>11} {'step s':>7} {'peak RSS MB':>12} {'training MB':>12} {'loss':>8} "
          f"{'time ratio':>10} {'memory ratio':>12}")
    for micro, r in rows:
        print(f"{micro:11d} {r['step_s']:7.2f} {r['peak_mb']:12.0f} {r['train_mb']:12.0f} {r['loss']:8.4f} "
              f"{r['step_s'] / first['step_s']:10.2f} {r['peak_mb'] / first['peak_mb']:12.2f}")


if __name__ == "__main__":
    main()
