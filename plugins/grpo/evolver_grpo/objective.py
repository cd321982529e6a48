"""The clipped-ratio objective, the KL estimators and the loss aggregations.

Everything works on flat per-token tensors (all completion tokens of a batch, packed), with a
per-token *weight* that encodes the aggregation. So a batch split into micro-batches for memory
sums to exactly the loss of the whole batch (gradient accumulation is exact for every mode):

- ``sequence`` (GRPO): mean over each sequence's tokens, then mean over sequences: w = 1/(N·|o_i|);
- ``token`` (DAPO): mean over all tokens of the batch: w = 1/Σ|o_i|;
- ``constant`` (Dr.GRPO): sum over tokens divided by N·L, L a constant (the max new tokens): w = 1/(N·L).
"""
from __future__ import annotations

import torch

from evolver import EvolverError

AGGREGATIONS = ("sequence", "token", "constant")
KL_ESTIMATORS = ("k1", "k2", "k3")
LOG_RATIO_CLAMP = 10.0  # keeps exp() of k3 finite when the policy drifts far on a rare token


def token_weights(lengths: list[int], mode: str, constant_len: int | None = None) -> torch.Tensor:
    """Per-token aggregation weights, packed in sample order."""
    n = len(lengths)
    if mode == "sequence":
        parts = [torch.full((L,), 1.0 / (n * L)) for L in lengths if L]
    elif mode == "token":
        tot = sum(lengths)
        parts = [torch.full((L,), 1.0 / tot) for L in lengths if L]
    elif mode == "constant":
        if not constant_len:
            raise EvolverError("loss aggregation 'constant' needs the constant length (max_new_tokens)")
        parts = [torch.full((L,), 1.0 / (n * constant_len)) for L in lengths if L]
    else:
        raise EvolverError(f"unknown loss aggregation {mode!r}; choose from {', '.join(AGGREGATIONS)}")
    return torch.cat(parts) if parts else torch.zeros(0)


def kl(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(π_θ || π_ref) from the sampled token's log-probs (Schulman's k1/k2/k3).

    k1 = log π_θ/π_ref; k2 = ½(log π_θ/π_ref)²; k3 = π_ref/π_θ - log(π_ref/π_θ) - 1 (≥ 0).
    The log-ratio is clamped to ±10 first."""
    log_ratio = (ref_logp - logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # log π_ref/π_θ
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio ** 2
    if estimator == "k3":
        return torch.exp(log_ratio) - log_ratio - 1
    raise EvolverError(f"unknown KL estimator {estimator!r}; choose from {', '.join(KL_ESTIMATORS)}")


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, weights: torch.Tensor, *,
                eps_low: float = 0.2, eps_high: float = 0.2, beta: float = 0.0,
                ref_logp: torch.Tensor | None = None, kl_estimator: str = "k3") -> tuple[torch.Tensor, dict]:
    """Σ_t w_t · ( -min(ρ_t A_t, clip(ρ_t, 1-ε_low, 1+ε_high) A_t) + β·KL_t ), ρ_t = π_θ/π_old.

    All arguments are flat per-token tensors. Returns the loss and detached metrics (sums weighted
    by ``weights``, so they add up across micro-batches like the loss does)."""
    ratio = torch.exp(logp - old_logp)
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high)
    pg = -torch.minimum(ratio * adv, clipped * adv)
    per_token = pg
    stats = {}
    if beta and ref_logp is not None:
        k = kl(logp, ref_logp, kl_estimator)
        per_token = per_token + beta * k
        stats["kl"] = float((k.detach() * weights).sum())
    with torch.no_grad():
        # A token is clipped when the clipped term is the active one of the min.
        hit = ((ratio < 1 - eps_low) & (adv < 0)) | ((ratio > 1 + eps_high) & (adv > 0))
        stats["clip_frac"] = float((hit.float() * weights).sum())
        stats["ratio_mean"] = float((ratio * weights).sum())
    return (per_token * weights).sum(), stats
