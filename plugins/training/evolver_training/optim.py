"""The optimiser step every trainer takes, the learning-rate schedule, and which weights train.

A step is the same in SFT, GRPO, PPO, self-distillation and DPO: zero the gradients, set the step's
learning rate, backpropagate each micro-batch's loss (already its share of the whole batch, so the
gradients sum to the batch's), clip their norm, step AdamW (or another torch optimiser). :class:`Optimiser` holds that frame; each
trainer brings its loss and its data.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from evolver import EvolverError


def lr_at(step: int, total: int, peak: float, warmup: float, schedule: str) -> float:
    """The learning rate of optimizer step ``step`` (1-based) of ``total``: a linear rise over the first
    ``warmup`` fraction of them, then ``schedule`` (constant, linear or cosine decay towards 0; the
    last step still moves the weights)."""
    rise = max(1, round(warmup * total)) if warmup > 0 else 0
    if step <= rise:
        return peak * step / (rise + 1)
    if schedule == "constant":
        return peak
    left = (total - step + 1) / max(1, total - rise)  # 1 at the first step after warm-up, 1/len at the last
    return peak * (left if schedule == "linear" else 0.5 * (1 - math.cos(math.pi * left)))


class Optimiser:
    """AdamW (or ``algorithm``) with the step frame the trainers share: :meth:`begin` zeroes the gradients
    and sets the step's learning rate (``schedule`` over ``total`` steps after ``warmup``; the constant
    ``lr`` when no step is given), the trainer backpropagates its micro-batches, :meth:`finish` clips the
    gradient norm to ``max_grad_norm`` (with ``clip`` where the gradients are sharded over ranks:
    :meth:`evolver_training.parallel.Parallel.clip_grad_norm`) and steps. Everything else is the torch
    optimiser's (``state_dict`` for resuming, ``param_groups``, ``step``)."""

    def __init__(self, params, *, lr: float, weight_decay: float = 0.0, max_grad_norm: float = 1.0,
                 clip: Callable[[float], torch.Tensor] | None = None, schedule: str = "constant",
                 warmup: float = 0.0, total: int = 0, algorithm: type = torch.optim.AdamW):
        self.inner = algorithm(list(params), lr=lr, weight_decay=weight_decay)
        self.peak, self.max_grad_norm, self.clip = lr, max_grad_norm, clip
        self.schedule, self.warmup, self.total = schedule, warmup, total

    def __getattr__(self, name: str):
        if name == "inner":  # not built yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def begin(self, step: int | None = None) -> float:
        """Zero the gradients and set the learning rate of optimizer step ``step`` (1-based); returns it."""
        self.inner.zero_grad(set_to_none=True)
        lr = lr_at(step, self.total, self.peak, self.warmup, self.schedule) if step and self.total else self.peak
        for group in self.inner.param_groups:
            group["lr"] = lr
        return lr

    def finish(self, step: bool = True) -> float:
        """Clip the gradients' norm, step (unless ``step`` is False: a warm-up that trains something else)
        and return the norm before clipping."""
        params = [p for group in self.inner.param_groups for p in group["params"]]
        gn = self.clip(self.max_grad_norm) if self.clip else torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        if step:
            self.step()
        return float(gn)


def freeze_below(model, train_layers: int | None) -> None:
    """Train only the top ``train_layers`` decoder layers and the final norm (None: every weight).
    The embeddings (tied to the LM head in SmolLM2) and the layers below stay fixed, so autograd
    records nothing below the first trained layer: the backward pass stops there."""
    if train_layers is None:
        return
    from evolver_training.logprobs import split_model

    trunk, head = split_model(model)
    layers = list(getattr(trunk, "layers", []))
    if not layers:
        raise EvolverError("train_layers needs a decoder with a .layers list; leave it unset for this model")
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in layers[max(0, len(layers) - train_layers):]:
        for p in layer.parameters():
            p.requires_grad_(True)
    norm = getattr(trunk, "norm", None)
    for p in (norm.parameters() if norm is not None else []):
        p.requires_grad_(True)
