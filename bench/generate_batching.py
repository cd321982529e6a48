"""Generation throughput of the transformers backend on the embedded model: batch 1 vs 8 vs 16, each
decoding into the cache buffer the prefill reserved (the backend's: each token written in place) and
into a cache that grows by concatenation on every token (HF's DynamicCache, what ``model.generate``
uses; the prefilled KV copied into one first), side by side.

Sampled (temperature 0.7, fixed seeds) so that rows run to roughly similar lengths; tokens/s counts
the completion tokens actually produced. ``--context`` puts that many words of game text before each
question: an agent's prompts are long, and the cache copied per token grows with them.

    .venv/bin/python bench/generate_batching.py [--max-tokens 64] [--dtype auto] [--context 400]
"""
from __future__ import annotations

import argparse

from evolver.types import GenRequest, Message
from evolver_transformers.backend import TransformersBackend

QUESTIONS = ["Describe a kitchen in a text adventure.", "What should I do if I find a locked door?",
             "Write a short story about a cat.", "Explain how to cook a potato.",
             "List some fruits and their colours.", "Give advice to a new gardener.",
             "What is a good strategy in chess?", "Describe the weather on a rainy day."]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--context", type=int, default=400, help="words of game text before each question")
    args = ap.parse_args()
    from transformers import DynamicCache

    def growing(prefill):
        def run(prompts, extra=0):
            logits, cache, mask, order = prefill(prompts, extra)
            plain = DynamicCache()
            for i, layer in enumerate(cache.layers):
                plain.update(layer.keys.clone(), layer.values.clone(), i)
            return logits, plain, mask, order
        return run

    text = " ".join(["You are in the kitchen. There is a fridge, a counter and a closed door to the north."]
                    * max(1, args.context // 17))
    b = TransformersBackend(dtype=args.dtype, threads=args.threads)
    b.generate([GenRequest([Message("user", "hi")], max_tokens=4)])  # warm-up
    reserved = b._prefill
    print(f"model {b.model}, dtype {args.dtype}, max_tokens {args.max_tokens}")
    print(f"{'batch':>5} {'requests':>8} {'cache':>8} {'tokens':>6} {'decode s':>8} {'tok/s':>7} {'vs growing':>10}")
    for batch, n_req in ((1, 4), (8, 8), (16, 16)):
        b.max_batch = batch
        reqs = [GenRequest([Message("system", text), Message("user", QUESTIONS[i % len(QUESTIONS)])],
                           max_tokens=args.max_tokens, temperature=0.7, seed=i) for i in range(n_req)]
        rates = {}
        for cache in ("growing", "reserved"):
            b._prefill = reserved if cache == "reserved" else growing(reserved)
            b._prefixes.clear()
            b.timing.clear()
            out = b.generate(reqs)
            dt = b.timing["decode_s"]  # decoding alone: prefill is the same work either way
            toks = sum(o.completion_tokens for o in out)
            rates[cache] = toks / dt
            print(f"{batch:>5} {n_req:>8} {cache:>8} {toks:>6} {dt:>8.2f} {rates[cache]:>7.1f} "
                  f"{rates[cache] / rates['growing']:>9.2f}x")


if __name__ == "__main__":
    main()
