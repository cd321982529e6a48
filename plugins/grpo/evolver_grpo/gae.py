"""Generalised advantage estimation over the tokens of one episode, for PPO with a learned critic.

An episode of several model calls is *one* trajectory whose actions are the completion tokens of its
calls, in order; the environment's answers between calls are not actions (they are part of the next
call's prompt, so of the next state). Rewards are sparse: each call's reward sits on its last token,
every other token gets 0. The value after a call's last token is the next call's first value (its
prompt holds what the environment answered), so credit flows back across calls, discounted by γ per
completion token; after the episode's last call the value is 0 (a truncated episode is treated as
ended too: there is no next state to bootstrap from).

So every model call is a trainable sample with its own token-level advantages, whatever its length
and however many calls the episode made (a compacted long episode's sub-traces included), and no
group of rollouts is needed.

GAE (Schulman et al. 2016): δ_t = r_t + γ V_{t+1} - V_t and A_t = Σ_l (γλ)^l δ_{t+l}; the critic's
targets are the returns A_t + V_t. λ = 1 gives the discounted return minus the value, λ = 0 the
one-step TD error.
"""
from __future__ import annotations

import numpy as np


def gae(rewards: np.ndarray, values: np.ndarray, gamma: float = 1.0, lam: float = 0.95,
        last_value: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, returns) of one trajectory of T steps; ``values`` are V(s_0..s_{T-1}) and
    ``last_value`` is V(s_T) (0 when the trajectory ended)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if rewards.shape != values.shape:
        raise ValueError(f"{len(rewards)} rewards for {len(values)} values")
    adv = np.zeros_like(values)
    running, next_value = 0.0, float(last_value)
    for t in range(len(values) - 1, -1, -1):
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        adv[t] = running
        next_value = values[t]
    return adv, adv + values


def episode_gae(values: list[np.ndarray], rewards: list[float], gamma: float = 1.0,
                lam: float = 0.95) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per model call of one episode (in order), its tokens' (advantages, returns).

    ``values[k]``: the critic's values at call k's completion tokens (the value of the state each token
    is chosen in); ``rewards[k]``: the reward at the end of call k. The calls are chained into one
    trajectory (see the module docstring); a call without tokens gets empty arrays."""
    if len(values) != len(rewards):
        raise ValueError(f"{len(rewards)} rewards for {len(values)} calls")
    lengths = [len(v) for v in values]
    flat_v = np.concatenate([np.asarray(v, dtype=np.float64) for v in values]) if values else np.zeros(0)
    flat_r = np.zeros_like(flat_v)
    end = 0
    for n, r in zip(lengths, rewards):
        end += n
        if n:
            flat_r[end - 1] += r
        elif r:
            raise ValueError("a reward on a call without completion tokens")
    adv, ret = gae(flat_r, flat_v, gamma, lam)
    out, start = [], 0
    for n in lengths:
        out.append((adv[start:start + n], ret[start:start + n]))
        start += n
    return out


def call_rewards(running: list[float], total: float, per_step: bool = True) -> list[float]:
    """The reward at the end of each trained model call of an episode.

    ``running``: the episode's running score after each call (``Step.reward``), ``total``: the
    episode's whole reward (score, sub-rewards and format rewards, weighted, as GRPO sums them).
    ``per_step``: each call earns the change of the running score it brought, and the last call the
    rest of ``total`` (the sub-rewards and format rewards the episode reports only at its end; a
    crashed episode's score is 0 whatever it had scored), so the rewards always sum to ``total``.
    Otherwise the whole ``total`` sits on the last call."""
    n = len(running)
    if not n:
        return []
    out = [0.0] * n
    if per_step:
        prev = 0.0
        for k in range(n - 1):
            out[k] = float(running[k]) - prev
            prev = float(running[k])
        out[-1] = float(total) - prev
    else:
        out[-1] = float(total)
    return out


def whiten(x: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """(x - mean) / std over the batch's tokens; a constant batch is all zeros."""
    x = np.asarray(x, dtype=np.float64)
    if x.size < 2:
        return np.zeros_like(x)
    return (x - x.mean()) / (x.std() + eps)


def explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
    """1 - Var(returns - values) / Var(returns): 1 when the critic predicts the returns, 0 when it is no
    better than their mean, negative when worse. 0 for constant returns (nothing to explain)."""
    values, returns = np.asarray(values, dtype=np.float64), np.asarray(returns, dtype=np.float64)
    var = returns.var() if returns.size else 0.0
    if var < 1e-12:
        return 0.0
    return float(1.0 - (returns - values).var() / var)
