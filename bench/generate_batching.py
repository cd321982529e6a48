"""Generation throughput of the transformers backend on the embedded model: batch 1 vs 8 vs 16.

Sampled (temperature 0.7, fixed seeds) so that rows run to roughly similar lengths; tokens/s counts
the completion tokens actually produced.

    .venv/bin/python bench/generate_batching.py [--max-tokens 64] [--dtype bf16]
"""
from __future__ import annotations

import argparse
import time

from evolver.backends.transformers_backend import TransformersBackend
from evolver.types import GenRequest, Message

QUESTIONS = ["Describe a kitchen in a text adventure.", "What should I do if I find a locked door?",
             "Write a short story about a cat.", "Explain how to cook a potato.",
             "List some fruits and their colours.", "Give advice to a new gardener.",
             "What is a good strategy in chess?", "Describe the weather on a rainy day."]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    b = TransformersBackend(dtype=args.dtype, threads=args.threads)
    b.generate([GenRequest([Message("user", "hi")], max_tokens=4)])  # warm-up
    print(f"model {b.model}, dtype {args.dtype}, max_tokens {args.max_tokens}")
    print(f"{'batch':>5} {'requests':>8} {'tokens':>6} {'seconds':>7} {'tok/s':>7}")
    for batch, n_req in ((1, 4), (8, 8), (16, 16)):
        b.max_batch = batch
        reqs = [GenRequest([Message("user", QUESTIONS[i % len(QUESTIONS)])], max_tokens=args.max_tokens,
                           temperature=0.7, seed=i) for i in range(n_req)]
        t0 = time.perf_counter()
        out = b.generate(reqs)
        dt = time.perf_counter() - t0
        toks = sum(o.completion_tokens for o in out)
        print(f"{batch:>5} {n_req:>8} {toks:>6} {dt:>7.2f} {toks / dt:>7.1f}")


if __name__ == "__main__":
    main()
