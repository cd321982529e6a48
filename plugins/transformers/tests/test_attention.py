"""The packed GQA attention (evolver_transformers.attention) against transformers' SDPA and fp32."""
from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("T", [1, 3, 40])
def test_gqa_attention_equals_transformers_sdpa(T, monkeypatch):
    """Packing query heads onto their KV head (no repeat_kv copies) computes the same attention, holes
    in the mask and all, and without a mask."""
    from types import SimpleNamespace
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from evolver_transformers.attention import gqa_sdpa

    torch.manual_seed(0)
    B, H, groups, W, D = 3, 6, 3, 50, 8
    module = SimpleNamespace(num_key_value_groups=groups, is_causal=True, training=False)
    q = torch.randn(B, H, T, D)
    k, v = torch.randn(B, H // groups, W, D), torch.randn(B, H // groups, W, D)
    mask = torch.ones(B, 1, T, W, dtype=torch.bool).tril(W - T)  # causal over the fed tokens...
    mask[0, :, :, :7] = False  # ...left padding...
    mask[1, :, :, 20:23] = False  # ...and holes left by rejected drafts
    got, _ = gqa_sdpa(module, q, k, v, mask, scaling=D ** -0.5)
    want, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=D ** -0.5)
    assert got.shape == want.shape == (B, T, H, D)
    assert torch.allclose(got, want, atol=1e-5)
    # No mask (transformers drops it for rows with nothing to hide): one token sees every key, and
    # several tokens over as many keys are causal.
    k, v = k[:, :, :T], v[:, :, :T]
    got, _ = gqa_sdpa(module, q, k, v, None, scaling=D ** -0.5)
    want, _ = sdpa_attention_forward(module, q, k, v, None, scaling=D ** -0.5)
    assert torch.allclose(got, want, atol=1e-5)
    if T == 1:
        k, v = torch.randn(B, H // groups, W, D), torch.randn(B, H // groups, W, D)
        sdpa, calls = torch.nn.functional.scaled_dot_product_attention, []
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                            lambda *a, **kw: calls.append(a[0].shape) or sdpa(*a, **kw))
        got, _ = gqa_sdpa(module, q, k, v, None, scaling=D ** -0.5)
        assert calls == [(B, H // groups, groups, D)]  # packed: not torch's enable_gqa over 6 heads
        want, _ = sdpa_attention_forward(module, q, k, v, None, scaling=D ** -0.5)
        assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("T", [1, 3, 40])
def test_bf16_matmul_attention_equals_fp32_attention(T, monkeypatch):
    """bf16 inference on a CPU runs the packed attention of several tokens per row as matmuls around a
    softmax, a few rows at a time: the same attention as fp32 up to bf16 rounding, holes and padding
    included, and a query that may see nothing comes out finite (a NaN there would reach every row's
    later layers as 0 x NaN)."""
    from types import SimpleNamespace
    import evolver_transformers.attention as attention

    torch.manual_seed(0)
    B, H, groups, W, D = 5, 6, 3, 50, 8
    module = SimpleNamespace(num_key_value_groups=groups, is_causal=True, training=False)
    q = torch.randn(B, H, T, D)
    k, v = (torch.randn(B, H // groups, W, D).bfloat16() for _ in "kv")
    mask = torch.ones(B, 1, T, W, dtype=torch.bool).tril(W - T)
    mask[0, :, :, :7] = False  # left padding
    mask[1, :, :, 20:23] = False  # holes left by rejected drafts
    mask[2, :, 0, :] = False  # a pad query
    monkeypatch.setattr(attention, "SMALL", 0)
    monkeypatch.setattr(attention, "CHUNK", 2 * (H // groups) * groups * T * W)  # two rows per chunk
    calls, bmm = [], torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda *a, **kw: calls.append(a[0].shape) or bmm(*a, **kw))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = attention.gqa_sdpa(module, q, k, v, mask, scaling=D ** -0.5)
    if T == 1:  # decoding stays on the fused kernel: it reads the cache once, where the matmuls copy K
        assert calls == []
    else:
        assert len(calls) == 3 and calls[0][0] == 2 * H // groups  # rows 0-1, 2-3, 4: chunks, not the fused kernel
    kk, vv = (x.float().repeat_interleave(groups, 1) for x in (k, v))
    p = ((q @ kk.transpose(-1, -2)) * D ** -0.5).masked_fill(~mask, float("-inf")).softmax(-1)
    want = (p @ vv).transpose(1, 2)
    seen = mask.any(-1)[:, 0]  # [B, T]: queries with a key to see
    assert got.shape == want.shape == (B, T, H, D) and torch.isfinite(got).all()
    assert (got.float() - want).abs()[seen].max() < 0.05
    assert not seen.all()
