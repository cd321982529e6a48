"""Attention for grouped-query models (SmolLM2: 9 query heads share 3 KV heads) that never copies
the KV cache per query head.

transformers' SDPA path copies K and V to every query head (``repeat_kv``) whenever a mask is given
and more than one token is fed, and calls torch's ``enable_gqa`` for one token without a mask (a row
decoding alone), which is 5.6x slower in bf16 on this CPU than packing the heads. Here the query heads
are packed onto their KV head in every case but a causal prefill without a cache: one decoding token,
the few tokens of a draft check (``PromptLookup``) and a prefill, with the mask repeated per head of a
group. For 32 rows of ~480 cached tokens the copies are ~1 GB of memory traffic per forward: a forward
of 2 tokens per row cost 2.1x one of 1 token before this.
"""
from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "evolver_gqa_sdpa"


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
    # packed row g * T + t is token t of the g-th head of a group, so the mask repeats per head.
    q = query.reshape(B, H // groups, groups * T, D)
    mask = attention_mask if T == 1 or attention_mask is None else attention_mask.repeat(1, 1, groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(q, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(B, H, T, D).transpose(1, 2).contiguous(), None


def use_gqa_sdpa(model) -> bool:
    """Switch ``model`` to :func:`gqa_sdpa` if it runs transformers' SDPA attention; True if it did."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(NAME, gqa_sdpa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True
