"""What a model call pays for bf16 autocast's weight casts: SmolLM2-135M's linear layers as plain
``nn.Linear`` (autocast casts every fp32 weight again in each new autocast context, i.e. each backend
call) vs ``Bf16CachedLinear`` (the bf16 copies kept across calls, ``evolver_transformers/bf16_weights.py``).

One model, its layers' class switched back and forth, so both rows use the same weights and memory.
A one-token decoding forward over an 800-token KV cache, timed as the first forward of a fresh
autocast context (what every ``generate`` / ``choose`` call starts with) and as a second one.

    .venv/bin/python bench/bf16_weights.py [--reps 30] [--context 800]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from evolver_transformers.backend import TransformersBackend
from evolver_transformers.bf16_weights import Bf16CachedLinear, keep_bf16_weights


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--context", type=int, default=800)
    args = ap.parse_args()
    model = TransformersBackend(dtype="fp32").hf_model  # fp32 weights, no cached copies yet
    keep_bf16_weights(model)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    context = torch.randint(0, 40000, (1, args.context))
    token = torch.randint(0, 40000, (1, 1))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        cache = model(input_ids=context, use_cache=True).past_key_values

    def step() -> float:
        start = time.perf_counter()
        model(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1)
        took = time.perf_counter() - start
        for layer in cache.layers:  # forget the token: every forward sees the same context
            layer.keys, layer.values = layer.keys[:, :, :args.context], layer.values[:, :, :args.context]
        return took

    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.reps):
        for name, cls in (("nn.Linear (autocast casts)", nn.Linear), ("Bf16CachedLinear", Bf16CachedLinear)):
            for m in linears:
                m.__class__ = cls
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                times.setdefault((name, "fresh"), []).append(step())
                times.setdefault((name, "warm"), []).append(step())
    med = {k: 1e3 * statistics.median(v[3:]) for k, v in times.items()}
    print(f"SmolLM2-135M bf16 autocast on CPU, 1-token forward over {args.context} cached tokens, "
          f"median of {args.reps - 3}")
    print(f"{'linear layers':28} {'first forward of a call':>24} {'a later forward':>16}")
    for name in ("nn.Linear (autocast casts)", "Bf16CachedLinear"):
        print(f"{name:28} {med[(name, 'fresh')]:21.1f} ms {med[(name, 'warm')]:13.1f} ms")
    a, b = "nn.Linear (autocast casts)", "Bf16CachedLinear"
    print(f"first forward of a call: {med[(a, 'fresh')] / med[(b, 'fresh')]:.2f}x; "
          f"later forwards: {med[(a, 'warm')] / med[(b, 'warm')]:.2f}x")


if __name__ == "__main__":
    main()
