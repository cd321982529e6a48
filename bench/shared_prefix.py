"""Training steps with shared prompt prefixes run once (``evolver_training.logprobs``, ``share``) vs every
sample in a row of its own, side by side, on the embedded SmolLM2-135M:

- **SFT** on twx-easy gold steps as ``evolver train --sft`` renders them (seeded skill bank, seed
  harness): batches of shuffled samples (the default) or of consecutive episode steps
  (``batch_by = "episode"``), each in rows of their own (the trainer before ``share_prefix``) and
  with shared prefixes. Seconds per optimizer step of ``batch_size`` samples, tokens through the
  trunk, peak RSS (each configuration in a process of its own).
- **GRPO**: one forward and backward over a group of G completions of one prompt (the shapes of a
  skill-augmented GRPO step), rows vs shared.

    .venv/bin/python bench/shared_prefix.py [--steps 5] [--per-category 3] [--group 8]

The loss and gradients are the same either way up to float rounding (plugins/grpo/tests/test_logprobs_shared.py).
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = {"shuffled samples, own rows": {"batch_by": "sample", "share_prefix": 0},
           "shuffled samples, shared prefixes (default)": {"batch_by": "sample", "share_prefix": 64},
           "episode steps, own rows": {"batch_by": "episode", "share_prefix": 0},
           "episode steps, shared prefixes": {"batch_by": "episode", "share_prefix": 64}}


def computed_tokens(batch, rows: int, share: int) -> int:
    from evolver_training.logprobs import prefix_groups
    from evolver_training.sft import micro_batches

    total = 0
    for mb in micro_batches(batch, rows, share):
        lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in mb]
        groups = prefix_groups([s.prompt_ids for s in mb], lengths, share) if share else [(0, [i]) for i in range(len(mb))]
        # rows of their own are padded to the forward's longest
        total += sum(sum(lengths[i] for i in g) - L * (len(g) - 1) if L else 0 for L, g in groups)
        alone = [lengths[g[0]] for L, g in groups if not L]
        total += len(alone) * max(alone, default=0)
    return total


def sft_child(name: str, steps: int, per_category: int) -> dict:
    sys.path.insert(0, str(HERE))
    from action_modes import seed_workspace  # a sibling script

    from evolver_skillrl.sft import SkillSFTTrainer as SFTTrainer

    with seed_workspace() as (_, run, _):
        trainer = SFTTrainer(run, {"per_category": per_category, "save_every": 0, **CONFIGS[name]})
        trainer.setup()
        times, tokens, computed = [], 0, 0
        for n, batch in enumerate(trainer.batches()):
            if n > steps:
                break
            row = trainer.step(n + 1, batch)
            if n:  # the first step selects kernels for new shapes
                times.append(row["step_s"])
                tokens += sum(len(s.prompt_ids) + len(s.completion_ids) for s in batch)
                computed += computed_tokens(batch, trainer.cfg.micro_batch, trainer.cfg.share_prefix)
    return {"step_s": statistics.mean(times), "tokens": tokens, "computed": computed,
            "samples": len(trainer.samples), "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
            "batch": trainer.cfg.batch_size, "micro": trainer.cfg.micro_batch}


def grpo_child(share: int, group: int, prompt_len: int, new: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from evolver_transformers.embedded import embedded_model_dir
    from evolver_training.logprobs import completion_logprobs

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(embedded_model_dir(), dtype=torch.float32)
    prompt = torch.randint(100, 40000, (prompt_len,)).tolist()
    comps = [torch.randint(100, 40000, (new,)).tolist() for _ in range(group)]
    times = []
    for _ in range(3):
        model.zero_grad()
        t0 = time.perf_counter()
        lp = completion_logprobs(model, [prompt] * group, comps, share=share)
        (-lp.sum()).backward()
        times.append(time.perf_counter() - t0)
    return {"step_s": min(times[1:]), "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
            "tokens": group * (prompt_len + new), "computed": (prompt_len + group * new) if share else
            group * (prompt_len + new)}


def child(args) -> None:
    out = sft_child(args.child, args.steps, args.per_category) if args.child in CONFIGS else \
        grpo_child(int(args.child.split(":")[1]), args.group, args.prompt_len, args.new_tokens)
    print("RESULT " + json.dumps(out))


def spawn(name: str, args) -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--steps", str(args.steps), "--per-category",
           str(args.per_category), "--group", str(args.group), "--prompt-len", str(args.prompt_len),
           "--new-tokens", str(args.new_tokens)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][7:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5, help="SFT optimizer steps timed per configuration")
    ap.add_argument("--per-category", type=int, default=3, help="training tasks per game for the SFT data")
    ap.add_argument("--group", type=int, default=8, help="GRPO completions per prompt")
    ap.add_argument("--prompt-len", type=int, default=600)
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    import torch

    print(f"SmolLM2-135M, fp32 on cpu ({torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} threads")
    sft = {name: spawn(name, args) for name in CONFIGS}
    base = sft["shuffled samples, own rows"]
    print(f"\nSFT, twx-easy gold steps ({base['samples']} samples), batch {base['batch']}, micro-batch "
          f"{base['micro']}, mean of {args.steps} steps")
    print(f"| batches | s per step | vs shuffled rows | tokens computed / in the samples | peak RSS GB |")
    print("|---|---|---|---|---|")
    for name, r in sft.items():
        print(f"| {name} | {r['step_s']:.1f} | {base['step_s'] / r['step_s']:.2f}x | "
              f"{r['computed'] / r['tokens']:.2f} | {r['rss_gb']:.1f} |")
    grpo = {share: spawn(f"grpo:{share}", args) for share in (0, 64)}
    print(f"\nGRPO, one forward + backward: {args.group} completions of {args.new_tokens} tokens after one "
          f"{args.prompt_len}-token prompt")
    print("| rows | s | tokens computed | peak RSS GB |")
    print("|---|---|---|---|")
    for share, r in grpo.items():
        print(f"| {'shared prefix' if share else 'own rows'} | {r['step_s']:.2f} | {r['computed']} | {r['rss_gb']:.1f} |")
    print(f"shared / own rows: {grpo[0]['step_s'] / grpo[64]['step_s']:.2f}x faster")


if __name__ == "__main__":
    main()
