"""PPO options: ``[plugins.ppo]`` in evolver.toml, or ``--set plugins.ppo.KEY=VALUE``.

Every GRPO option (:class:`evolver_grpo.config.GRPOConfig`: rollouts, rewards, the clipped objective,
LoRA, checkpoints, evaluation) means the same here, except the group estimators' (``estimator``,
``scale_rewards``, ``dynamic_sampling``, ``gd2po_*``, ``gigpo_*``, ``taco_*``), which PPO does not use:
its advantages come from the critic.
"""
from __future__ import annotations

from typing import Literal

from pydantic import field_validator, model_validator

from evolver import plugin_options
from evolver_grpo.config import GRPOConfig


class PPOConfig(GRPOConfig):
    # single rollouts: no group is needed (group_size > 1 still plays each task that often)
    group_size: int = 1
    tasks_per_step: int = 8
    loss: str = "token"  # a token-level loss: sub-traces of any length weigh by their tokens
    beta: float = 0.0  # KL to a reference (0: none kept; the critic already costs memory)

    # GAE (evolver_grpo.gae): γ discounts per completion token, λ trades bias (0: TD error) for variance (1)
    gamma: float = 1.0
    lam: float = 1.0  # 1: Monte-Carlo returns less the value (verl's default for LLM PPO)
    # the reward at the end of each model call: the change of the episode's running score it brought,
    # the episode's end-only rewards on its last call (False: the whole reward on the last call)
    step_rewards: bool = True
    whiten_advantages: bool = True  # advantages to mean 0, std 1 over the batch's tokens

    # the critic (evolver_grpo.critic)
    critic: Literal["head", "model"] = "head"  # a value head on the policy, or a separate trunk + head
    critic_model: str | None = None  # "model": an HF causal LM folder (None: a copy of the policy)
    # "head": the value loss trains the shared trunk too (off: the head is a probe on the policy's
    # features; on the toy task a value gradient into the trunk slowed the policy down)
    critic_trunk_grad: bool = False
    critic_lr: float = 1e-4  # the critic's own parameters (the head; the whole critic model)
    vf_coef: float = 0.5  # weight of the value loss (for a head, against the policy loss on the trunk)
    value_clip: float | None = 0.2  # PPO's clipped value loss around the rollout's values (None: plain MSE)
    entropy_coef: float = 0.0  # entropy bonus (a gradient through the entropies)
    critic_warmup: int = 0  # the first N steps update only the critic (the policy's advantages need it)

    @field_validator("gamma", "lam")
    @classmethod
    def _unit(cls, v: float) -> float:
        if not 0.0 <= v <= 1.0:
            raise ValueError("must be between 0 and 1")
        return v

    @model_validator(mode="after")
    def _coherent(self):
        if self.dynamic_sampling:
            raise ValueError("dynamic_sampling replaces groups without reward spread; PPO needs no groups: "
                             "leave it off")
        if self.critic_model and self.critic != "model":
            raise ValueError("critic_model is the separate critic's weights: set critic = \"model\" too")
        return self


def load(options: dict) -> PPOConfig:
    return plugin_options(PPOConfig, options, "ppo")
