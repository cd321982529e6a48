"""Attention of a grouped-query model (SmolLM2-135M's shapes: 9 query heads over 3 KV heads, head dim
64) under bf16 autocast, three ways side by side: transformers' SDPA path (copies K and V to every
query head whenever a mask is given and more than one token is fed), the backend's packed path
(``evolver_transformers/attention.py``: query heads packed onto their KV head, the mask repeated) and
torch's own ``enable_gqa``. Shapes: a batch prefill, a single-row prefill, a draft check of 2 tokens
per row, a 1-token decode, a few rows checking 9-token drafts, and one row decoding alone with no mask
(transformers drops the mask then, and its SDPA path calls ``enable_gqa``).

Where several tokens per row are fed, in bf16 on a CPU, the packed path runs two batched matmuls
around a softmax instead of torch's fused kernel (``matmuls``); the ``packed, fused`` column is the
fused kernel on the same packed heads. K and V are slices of wider buffers, as the backend's cache
hands them over (room for the reply).

    .venv/bin/python bench/attention_gqa.py
"""
from __future__ import annotations

import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import evolver_transformers.attention as attention
from evolver_transformers.attention import gqa_sdpa

SHAPES = [(36, 73, 775, "prefill, 36 rows"), (12, 73, 400, "prefill, 12 rows"), (1, 73, 400, "prefill, 1 row"),
          (32, 2, 480, "draft check, 32 rows"), (32, 1, 480, "decode, 32 rows"), (5, 9, 400, "draft check, 5 rows"),
          (1, 1, 580, "decode, 1 row, no mask")]  # a row alone and whole: transformers drops its mask


def best_ms(fn, n: int = 8) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * min(times)


def main() -> None:
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True, training=False)
    print(f"{'shape':22} {'rows x fed x keys':>18} {'transformers ms':>15} {'packed ms':>9} {'packed, fused ms':>16} "
          f"{'enable_gqa ms':>13} {'packed speed-up':>15}")
    torch.manual_seed(0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for B, T, W, label in SHAPES:
            q = torch.randn(B, T, 9, 64).transpose(1, 2)  # as the model hands it over: a transposed view
            k, v = (torch.randn(B, 3, W + 32, 64, dtype=torch.bfloat16)[:, :, :W] for _ in "kv")
            mask = None if "no mask" in label else torch.ones(B, 1, T, W, dtype=torch.bool).tril(W - T)
            stock = best_ms(lambda: sdpa_attention_forward(module, q, k, v, mask, scaling=0.125))
            packed = best_ms(lambda: gqa_sdpa(module, q, k, v, mask, scaling=0.125))
            small, attention.SMALL = attention.SMALL, 1 << 62  # the fused kernel whatever the shape
            fused = best_ms(lambda: gqa_sdpa(module, q, k, v, mask, scaling=0.125))
            attention.SMALL = small
            gqa = best_ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125, enable_gqa=True))
            print(f"{label:22} {f'{B} x {T} x {W}':>18} {stock:15.2f} {packed:9.2f} {fused:16.2f} {gqa:13.2f} "
                  f"{stock / packed:14.2f}x")


if __name__ == "__main__":
    main()
