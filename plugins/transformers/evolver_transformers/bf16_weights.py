"""bf16 copies of a model's linear weights, kept from one call to the next.

Under bf16 autocast torch casts each fp32 weight to bf16 at its first use and keeps the copy only
until the outermost autocast context exits. The backend opens one context per call, so every
``generate`` or ``choose`` re-cast all of SmolLM2-135M's weights: 33 ms a call on 2 cores, 80% on top
of a one-token decoding forward (41 ms), paid once per step of every episode played one at a time.

``keep_bf16_weights`` makes each ``nn.Linear`` keep its bf16 copy across calls and re-cast it only
when its weight changes: a new tensor, or an in-place update (an optimizer step, ``load_state_dict``),
which bumps the tensor's version counter. The math is autocast's own, the same cast and the same bf16
matmul, so outputs are bitwise equal. Only inference uses the copies: with gradients enabled (a
learner's forward) or outside bf16 autocast a layer runs as usual on its fp32 weight. The weights stay
fp32 parameters, so the model still trains in place (the GRPO engine trains the backend's own model).
The price is the copies' memory, 2 bytes per weight (270 MB for SmolLM2-135M), held between calls.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_BF16 = torch.bfloat16


class Bf16CachedLinear(nn.Linear):
    """An ``nn.Linear`` whose inference under bf16 autocast reuses a cached bf16 weight.

    The class is swapped onto existing modules (``keep_bf16_weights``), so a deep copy or a LoRA
    wrapper sees an ordinary ``nn.Linear`` subclass that owns its own cache."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Called ~200 times per forward of a small model: the checks are kept to a few attribute reads.
        dev = "cuda" if x.is_cuda else x.device.type
        if torch.is_grad_enabled() or not torch.is_autocast_enabled(dev) or torch.get_autocast_dtype(dev) != _BF16:
            return F.linear(x, self.weight, self.bias)
        hit = _fresh_copy(self)
        # As a matrix: for a strided slice (the last position's hidden state) matmul would not fold
        # the batch dims into one mm and instead copies the whole weight for a bmm (43 ms for the
        # lm_head). A weight that requires grad, as autocast's cast of a parameter does, folds anyway.
        y = F.linear(x.reshape(-1, x.shape[-1]), hit[3], hit[4])
        return y.view(*x.shape[:-1], y.shape[-1])


def _fresh_copy(mod: Bf16CachedLinear):
    """The module's (weight, bias, stamp, bf16 weight, bf16 bias), re-cast if the weight changed. A
    stale copy of the same shape is overwritten in place, never replaced: a captured CUDA graph
    (``static_decode.py``) reads it at its address."""
    w, b, hit = mod.weight, mod.bias, mod.__dict__.get("_bf16_copy")
    stamp = (w._version, w.data_ptr(), None if b is None else (b._version, b.data_ptr()))
    if hit is not None and hit[0] is w and hit[1] is b and hit[2] == stamp:
        return hit
    if (hit is not None and hit[3].shape == w.shape and hit[3].device == w.device
            and (b is None) == (hit[4] is None) and (b is None or hit[4].shape == b.shape)):
        hit[3].copy_(w.detach())
        if b is not None:
            hit[4].copy_(b.detach())
        copy_w, copy_b = hit[3], hit[4]
    else:
        copy_w, copy_b = w.detach().to(_BF16), None if b is None else b.detach().to(_BF16)
    hit = mod.__dict__["_bf16_copy"] = (w, b, stamp, copy_w, copy_b)
    return hit


def refresh_bf16_copies(model: nn.Module) -> int:
    """Bring every cached bf16 copy in ``model`` up to date with its weight (in place); returns how
    many were stale. A CUDA graph replay does not run the modules' checks: its caller does this first."""
    n = 0
    for mod in model.modules():
        if isinstance(mod, Bf16CachedLinear) and "_bf16_copy" in mod.__dict__:
            before = mod.__dict__["_bf16_copy"]
            n += _fresh_copy(mod) is not before
    return n


def cached_copies(model: nn.Module) -> list:
    """The bf16 copies held now (a captured graph keeps them alive)."""
    return [t for mod in model.modules() if isinstance(mod, Bf16CachedLinear) and "_bf16_copy" in mod.__dict__
            for t in mod.__dict__["_bf16_copy"][3:] if t is not None]


def keep_bf16_weights(model: nn.Module) -> int:
    """Turn every plain ``nn.Linear`` in ``model`` into a ``Bf16CachedLinear``; returns how many."""
    n = 0
    for mod in model.modules():
        if type(mod) is nn.Linear:
            mod.__class__ = Bf16CachedLinear
            n += 1
    return n
