"""Advantage estimators, as a registry: how a group's rewards become each trained step's advantage.

Every estimator sees the whole batch as trajectories (one per episode) grouped by task, each with
named rewards and the state key of every trained step, and returns one advantage per step. A
group is the G rollouts of one task with the same program (and skill-bank version).

Conventions, fixed here once so the hand-computed tests can check them:
- ``std`` is the sample standard deviation (ddof=1, as TRL does) of a group; ``std_floor`` keeps
  a near-constant group from exploding; a group whose rewards are all equal has advantage exactly 0
  (never NaN), and is counted as zero-variance by the trainer.
- Weighted sums of rewards use ``weights`` (default 1 per reward name).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from evolver import EvolverError


@dataclass
class Trajectory:
    group: str  # rollouts of the same task share it
    rewards: dict[str, float]  # named rewards of the whole episode ("score", "format", ...)
    states: list[str] = field(default_factory=list)  # state key per trained step, in order
    tree: str = ""  # Tree-GRPO: the tree of its group it grew in ("": a tree of its own)


@dataclass
class AdvantageConfig:
    std_floor: float = 1e-4
    scale: bool = True  # divide by the group std (False: Dr.GRPO's unscaled mean-centred rewards)
    weights: dict[str, float] = field(default_factory=dict)
    gd2po_mode: str = "hard"  # "hard": drop rollouts whose reward advantages disagree; "snr": keep δ >= tau
    gd2po_tau: float = 0.8
    gigpo_omega: float = 1.0
    gigpo_gamma: float = 0.95


Estimator = Callable[[list[Trajectory], AdvantageConfig], list[np.ndarray]]
ESTIMATORS: dict[str, Estimator] = {}


def register(name: str):
    def deco(fn: Estimator) -> Estimator:
        ESTIMATORS[name] = fn
        return fn
    return deco


def estimate(name: str, trajs: list[Trajectory], cfg: AdvantageConfig | None = None) -> list[np.ndarray]:
    """Per trajectory, an array of one advantage per trained step."""
    if name not in ESTIMATORS:
        raise EvolverError(f"unknown advantage estimator {name!r}; known: {', '.join(sorted(ESTIMATORS))}")
    return ESTIMATORS[name](trajs, cfg or AdvantageConfig())


# ------------------------------------------------------------------------------------- helpers
def groups(trajs: list[Trajectory]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, t in enumerate(trajs):
        out.setdefault(t.group, []).append(i)
    return out


def reward_names(trajs: list[Trajectory]) -> list[str]:
    names: list[str] = []
    for t in trajs:
        names += [k for k in t.rewards if k not in names]
    return names


def total(t: Trajectory, cfg: AdvantageConfig) -> float:
    return sum(cfg.weights.get(k, 1.0) * v for k, v in t.rewards.items())


def _std(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1)) if len(x) > 1 else 0.0


def normalise(x: np.ndarray, cfg: AdvantageConfig, scale: bool | None = None) -> np.ndarray:
    """(x - mean) / max(std, floor); exactly 0 for a constant group."""
    centred = x - x.mean()
    if not np.any(np.abs(centred) > 1e-12):
        return np.zeros_like(x)
    if scale is False or (scale is None and not cfg.scale):
        return centred
    return centred / max(_std(x), cfg.std_floor)


def zero_variance(trajs: list[Trajectory], cfg: AdvantageConfig | None = None) -> list[str]:
    """Groups whose total rewards are all equal: no signal, whatever the estimator."""
    cfg = cfg or AdvantageConfig()
    out = []
    for g, idx in groups(trajs).items():
        r = np.array([total(trajs[i], cfg) for i in idx])
        if np.ptp(r) <= 1e-12:
            out.append(g)
    return out


def _broadcast(trajs: list[Trajectory], per_traj: np.ndarray) -> list[np.ndarray]:
    return [np.full(max(len(t.states), 1), float(a)) for t, a in zip(trajs, per_traj)]


def _per_reward(trajs: list[Trajectory], cfg: AdvantageConfig) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Group-normalised advantage per reward, [N, K], and each reward's group std, [N, K]."""
    names = reward_names(trajs)
    adv = np.zeros((len(trajs), len(names)))
    std = np.zeros_like(adv)
    for idx in groups(trajs).values():
        for k, name in enumerate(names):
            r = np.array([trajs[i].rewards.get(name, 0.0) for i in idx])
            adv[idx, k] = normalise(r, cfg, scale=True)
            std[idx, k] = _std(r)
    return adv, std, names


# ---------------------------------------------------------------------------------- estimators
@register("grpo")
def grpo(trajs: list[Trajectory], cfg: AdvantageConfig) -> list[np.ndarray]:
    """A_i = (R_i - mean_group R) / max(std_group R, floor)."""
    adv = np.zeros(len(trajs))
    for idx in groups(trajs).values():
        adv[idx] = normalise(np.array([total(trajs[i], cfg) for i in idx]), cfg)
    return _broadcast(trajs, adv)


@register("rloo")
def rloo(trajs: list[Trajectory], cfg: AdvantageConfig) -> list[np.ndarray]:
    """A_i = R_i - mean of the other G-1 rewards (leave-one-out baseline; 0 for a group of one)."""
    adv = np.zeros(len(trajs))
    for idx in groups(trajs).values():
        r = np.array([total(trajs[i], cfg) for i in idx])
        if len(r) > 1:
            adv[idx] = r - (r.sum() - r) / (len(r) - 1)
    return _broadcast(trajs, adv)


@register("gdpo")
def gdpo(trajs: list[Trajectory], cfg: AdvantageConfig) -> list[np.ndarray]:
    """Normalise each reward within its group, sum (weighted), then normalise over the batch."""
    adv, _, names = _per_reward(trajs, cfg)
    w = np.array([cfg.weights.get(n, 1.0) for n in names])
    summed = adv @ w if len(names) else np.zeros(len(trajs))
    centred = summed - summed.mean()
    if not np.any(np.abs(centred) > 1e-12):
        return _broadcast(trajs, np.zeros(len(trajs)))
    return _broadcast(trajs, centred / (np.std(summed) + 1e-8))


@register("gd2po")
def gd2po(trajs: list[Trajectory], cfg: AdvantageConfig) -> list[np.ndarray]:
    """GDPO's per-reward advantages; a rollout whose rewards pull in opposite directions is dropped
    (``hard``: any sign conflict; ``snr``: δ = |Σ w·A| / Σ |w·A| below tau), and each group's
    survivors are scaled by the fraction kept, q = M / G."""
    adv, _, names = _per_reward(trajs, cfg)
    w = np.array([cfg.weights.get(n, 1.0) for n in names])
    wa = adv * w
    summed = wa.sum(axis=1)
    if cfg.gd2po_mode == "hard":
        keep = ~((wa > 1e-12).any(axis=1) & (wa < -1e-12).any(axis=1))
    elif cfg.gd2po_mode == "snr":
        delta = np.abs(summed) / (np.abs(wa).sum(axis=1) + 1e-8)
        keep = delta >= cfg.gd2po_tau
    else:
        raise EvolverError(f"gd2po_mode {cfg.gd2po_mode!r}: use 'hard' or 'snr'")
    out = np.where(keep, summed, 0.0)
    for idx in groups(trajs).values():
        out[idx] *= keep[idx].sum() / len(idx)
    return _broadcast(trajs, out)


@register("dvao")
def dvao(trajs: list[Trajectory], cfg: AdvantageConfig) -> list[np.ndarray]:
    """Per-reward group advantages weighted by each reward's share of the group's spread:
    A = Σ_k (w_k σ_k / Σ_l w_l σ_l) A_k, so a saturated reward (small σ) stops dominating."""
    adv, std, names = _per_reward(trajs, cfg)
    w = np.array([cfg.weights.get(n, 1.0) for n in names])
    ws = std * w
    denom = ws.sum(axis=1, keepdims=True)
    mix = np.divide(ws, denom, out=np.zeros_like(ws), where=denom > 1e-12)
    return _broadcast(trajs, (mix * adv).sum(axis=1))


@register("gigpo")
def gigpo(trajs: list[Trajectory], cfg: AdvantageConfig) -> list[np.ndarray]:
    """A_t = A_episode + ω·A_step. Steps of one group that start from the same state form a step
    group; each step's return is γ^(T-t)·R (only the final reward, T steps, t from 1), normalised
    within its step group (a state seen once gets A_step = 0)."""
    episode = grpo(trajs, cfg)
    out = [e.copy() for e in episode]
    for idx in groups(trajs).values():
        by_state: dict[str, list[tuple[int, int, float]]] = {}
        for i in idx:
            t = trajs[i]
            T, R = len(t.states), total(t, cfg)
            for s, key in enumerate(t.states):
                by_state.setdefault(key, []).append((i, s, cfg.gigpo_gamma ** (T - (s + 1)) * R))
        for members in by_state.values():
            if len(members) < 2:
                continue
            a_step = normalise(np.array([m[2] for m in members]), cfg)
            for (i, s, _), a in zip(members, a_step):
                out[i][s] += cfg.gigpo_omega * a
    return out


@register("tree")
def tree(trajs: list[Trajectory], cfg: AdvantageConfig) -> list[np.ndarray]:
    """Tree-GRPO: A = A_intra + A_inter. A_inter normalises R over the whole group (every tree of the
    task), A_intra over the trajectories of the same tree (its backbone and the branches grown from
    it). A branch's steps before its branching point are its parent's and are not among its trained
    steps (``collect`` leaves replayed steps out), so each advantage reaches only what was sampled."""
    adv = np.zeros(len(trajs))
    for idx in groups(trajs).values():
        adv[idx] = normalise(np.array([total(trajs[i], cfg) for i in idx]), cfg)
        trees: dict[str, list[int]] = {}
        for i in idx:
            trees.setdefault(trajs[i].tree or f"#{i}", []).append(i)
        for members in trees.values():
            adv[members] += normalise(np.array([total(trajs[i], cfg) for i in members]), cfg)
    return _broadcast(trajs, adv)


@register("taco")
def taco(trajs: list[Trajectory], cfg: AdvantageConfig) -> list[np.ndarray]:
    """GRPO's advantages; the trainer then shrinks positive advantages on surprising tokens
    (see :func:`taco_token_weights`)."""
    return grpo(trajs, cfg)


TOKEN_LEVEL = {"taco"}  # estimators whose advantages are recalibrated per token


def taco_token_weights(old_logp, entropy, adv, alpha: float = 0.1, lam: float = 0.5):
    """TACO: a token is a tail risk when r = -log p - H + log α > 0 (p below α·e^-H); its positive
    advantage is scaled by ω = 1 - λ(1 - e^-r), between 1-λ and 1; negative advantages stay whole.

    Arguments are torch tensors of one shape (per token); returns the per-token advantage."""
    import math

    import torch

    r = -old_logp - entropy + math.log(alpha)
    w = torch.where(r > 0, 1 - lam * (1 - torch.exp(-r.clamp(min=0))), torch.ones_like(r))
    return torch.where(adv > 0, w * adv, adv)
