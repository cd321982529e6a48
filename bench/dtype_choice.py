"""bf16 autocast vs fp32 for the embedded model on this machine, side by side, for the three kinds
of work evolver does with it: prefill (a batch of agent prompts), decoding (the backend's
``generate``, batch 1 and 8) and a training step (forward and backward of the SFT/GRPO loss).

bf16 is fast only on CPUs that compute in it natively (AVX512-BF16 or AMX, e.g. recent Xeons); on
others (AVX2-only EPYCs, seen here) every bf16 op is emulated. ``dtype = "auto"``, the default, picks
by the CPU's capabilities; the last line says what it picked here.

    .venv/bin/python bench/dtype_choice.py [--reps 3] [--tokens 400]
"""
from __future__ import annotations

import argparse
import time

import torch

from evolver.types import GenRequest, Message
from evolver_transformers.backend import TransformersBackend
from evolver_transformers.precision import bf16_native, use_autocast

TEXT = "You are in the kitchen. There is a fridge, a counter and a closed door to the north. "


def best(fn, reps: int) -> float:
    """The fastest of ``reps`` runs (after one warm-up): the others measured the machine's noise."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=400, help="prompt tokens per row")
    ap.add_argument("--max-tokens", type=int, default=24, help="tokens decoded per request")
    args = ap.parse_args()
    from evolver_training.logprobs import completion_logprobs

    rows = {}
    for dtype in ("fp32", "bf16"):
        b = TransformersBackend(dtype=dtype, lookup=0)
        ids = b.tokenizer(TEXT * (args.tokens // 18 + 1))["input_ids"][:args.tokens]
        batch = torch.tensor([ids] * 8)

        def prefill():
            with b._ctx():
                b.hf_model(input_ids=batch, use_cache=False)

        def decode(n):
            def run():
                b._prefixes.clear()
                b.generate([GenRequest([Message("user", TEXT * 8 + f"Question {i}: what next?")],
                                       max_tokens=args.max_tokens, seed=i, temperature=0.7) for i in range(n)])
            return run

        def train_step():
            lp = completion_logprobs(b.hf_model, [ids] * 2, [ids[:16]] * 2, autocast=dtype == "bf16")
            (-lp.sum()).backward()
            b.hf_model.zero_grad(set_to_none=True)

        rows[dtype] = {"prefill 8 x %d tokens" % args.tokens: best(prefill, args.reps),
                       "generate, 1 request": best(decode(1), args.reps),
                       "generate, 8 requests": best(decode(8), args.reps),
                       "train step, 2 x %d tokens" % args.tokens: best(train_step, args.reps)}
        del b
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, native bf16: {bf16_native(torch.device('cpu'))}, "
          f"{torch.get_num_threads()} threads")
    print(f"{'work':28} {'fp32 s':>8} {'bf16 s':>8} {'bf16 / fp32':>11}")
    for work in rows["fp32"]:
        f, h = rows["fp32"][work], rows["bf16"][work]
        print(f"{work:28} {f:8.3f} {h:8.3f} {h / f:10.2f}x")
    picked = "bf16 autocast" if use_autocast("auto", torch.device("cpu")) else "fp32"
    print(f"dtype = 'auto' picks {picked} on this machine")


if __name__ == "__main__":
    main()
