"""Attention for grouped-query models (SmolLM2: 9 query heads share 3 KV heads) that never copies
the KV cache per query head.

transformers' SDPA path copies K and V to every query head (``repeat_kv``) whenever a mask is given
and more than one token is fed, and calls torch's ``enable_gqa`` for one token without a mask (a row
decoding alone), which is 5.6x slower in bf16 on this CPU than packing the heads. Here the query heads
are packed onto their KV head in every case but a causal prefill without a cache: one decoding token,
the few tokens of a draft check (``PromptLookup``) and a prefill, with the mask repeated per head of a
group. For 32 rows of ~480 cached tokens the copies are ~1 GB of memory traffic per forward: a forward
of 2 tokens per row cost 2.1x one of 1 token before this.

Where several tokens per row are fed (a prefill, a draft check) in bf16 on a CPU, the packed attention
is two batched matmuls around a softmax, a few rows at a time (``_chunked``), not torch's fused kernel:
that kernel computed 12 rows x 110 new tokens over 510 keys at ~120 GFLOP/s where the matmuls run at
~500, and took 43% of such a prefill forward of SmolLM2-135M (AMD EPYC Zen 5, 2 cores). One token
per row stays on the fused kernel: decoding reads the whole KV cache for a few FLOPs, and there the
matmuls' copy of K (below) cost more than it saved. The scores are bf16, as in transformers' eager
attention of a bf16 model; the model's logits stay as close to fp32 as with the fused kernel (KL
0.00088 vs 0.00086 per token on a 600-token prompt).
"""
from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "evolver_gqa_sdpa"
#: Scores computed at once (elements): 2 MB of bf16 stays in the cache between the two matmuls;
#: the whole batch's scores at once ran 2x slower than these chunks for 12 rows x 110 tokens.
CHUNK = 1 << 20
#: Below this many scores the fused kernel is as fast (one row decoding alone); above this many for
#: ONE row (long prompts), its tiling is.
SMALL, LARGE = 1 << 14, 1 << 22


def gqa_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None,
             **kwargs):
    groups = getattr(module, "num_key_value_groups", 1)
    B, H, T, D = query.shape
    # No mask: one token sees every key (a row decoding alone; transformers drops the mask then and
    # its own path calls torch's enable_gqa, 5.6x slower in bf16 here), while several tokens need
    # the causal mask that is_causal builds.
    if (groups == 1 or (attention_mask is None and T > 1)
            or (attention_mask is not None and attention_mask.dim() != 4) or dropout
            or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    # Query head h reads KV head h // groups: [B, H, T, D] -> [B, H / groups, groups * T, D], where
    # packed row g * T + t is token t of the g-th head of a group.
    q = query.reshape(B, H // groups, groups * T, D)
    scale = D ** -0.5 if scaling is None else scaling
    if T > 1 and _use_matmuls(q, key, value, attention_mask):
        out = _chunked(q, key, value, attention_mask, scale, groups)
    else:  # the fused kernel, with the mask repeated per head of a group
        mask = attention_mask if T == 1 or attention_mask is None else attention_mask.repeat(1, 1, groups, 1)
        out = torch.nn.functional.scaled_dot_product_attention(q, key, value, attn_mask=mask, scale=scale)
    return out.reshape(B, H, T, D).transpose(1, 2).contiguous(), None


def _use_matmuls(q, key, value, mask) -> bool:
    """bf16 inference on a CPU, neither tiny nor one long row (where the fused kernel is as fast), under
    a boolean mask shared by the heads (what transformers builds for SDPA)."""
    B, Hk, R, _ = q.shape
    per_row = Hk * R * key.shape[2]
    bf16 = value.dtype == torch.bfloat16 or (torch.is_autocast_enabled("cpu")
                                             and torch.get_autocast_dtype("cpu") == torch.bfloat16)
    return (q.device.type == "cpu" and bf16 and not torch.is_grad_enabled()
            and B * per_row >= SMALL and per_row <= LARGE
            and mask is not None and mask.dtype == torch.bool and mask.shape[1] == 1)


def _chunked(q, key, value, mask, scale: float, groups: int):
    """softmax(q k^T * scale + mask) v for packed queries ``q`` [B, Hk, groups * T, D] over ``key`` and
    ``value`` [B, Hk, W, D], ``mask`` [B, 1, T, W] (True: attend), a few rows at a time so a
    chunk's scores stay ~``CHUNK`` elements. A query that may attend to nothing (a pad row) gets a
    finite average of the values instead of NaN: a masked key still enters later layers' attention as
    0 x value, and 0 x NaN is NaN."""
    B, Hk, R, D = q.shape
    W = key.shape[2]
    dt = torch.bfloat16
    q, key, value = (q * scale).to(dt), key.to(dt), value.to(dt)  # (as the fused kernel casts under autocast)
    out = torch.empty((B, Hk, R, D), dtype=dt, device=q.device)
    step = max(1, CHUNK // (Hk * R * W))
    bias = _bias(mask, B, Hk, groups)
    with torch.autocast("cpu", enabled=False):  # bf16 in and out: autocast would run the softmax in fp32
        for lo in range(0, B, step):
            n = min(step, B - lo)
            # K copied compact first: a slice of a wider cache buffer, transposed, sends torch's bmm to
            # a loop of one small matmul per head (2.8 ms vs 0.6 ms with the copy, for 36 x 3 heads).
            qc = q[lo:lo + n].reshape(n * Hk, R, D)
            kc = key[lo:lo + n].reshape(n * Hk, W, D).contiguous().transpose(1, 2)
            s = torch.baddbmm(bias[lo * Hk:(lo + n) * Hk], qc, kc)
            torch.bmm(s.softmax(-1), value[lo:lo + n].reshape(n * Hk, W, D), out=out[lo:lo + n].view(n * Hk, R, D))
    return out


def _bias(mask, B: int, Hk: int, groups: int):
    """The mask as bf16 scores to add, [B * Hk, groups * T, W]: every layer of a forward gets the same
    mask tensor, so it is built once and kept on the mask (it lives as long as the mask does). Hidden
    keys get -1e30, not -inf: a pad query that may attend to nothing gets a finite average, not NaN."""
    hit = getattr(mask, "evolver_bias", None)
    if hit is not None and hit[0] == (mask._version, B, Hk, groups):
        return hit[1]
    T, W = mask.shape[-2:]
    bias = torch.zeros((B, Hk, groups, T, W), dtype=torch.bfloat16, device=mask.device)
    bias.masked_fill_(mask.expand(B, 1, T, W)[:, :, None].logical_not(), -1e30)
    bias = bias.view(B * Hk, groups * T, W)
    mask.evolver_bias = ((mask._version, B, Hk, groups), bias)
    return bias


def use_gqa_sdpa(model) -> bool:
    """Switch ``model`` to :func:`gqa_sdpa` if it runs transformers' SDPA attention; True if it did."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(NAME, gqa_sdpa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True
