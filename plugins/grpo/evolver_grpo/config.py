"""GRPO options: ``[plugins.grpo]`` in evolver.toml, or ``--set plugins.grpo.KEY=VALUE``."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evolver import plugin_options


class GRPOConfig(BaseModel):
    """The ``[plugins.grpo]`` options, validated: each field's comment says what it does."""

    model_config = ConfigDict(extra="forbid")

    # what to train on
    program: str = "seed"  # whose skills sit in the prompt (any program ref: seed, best, an id)
    skills: bool = True  # False: the same prompts without the program's skills
    split: str = "train"
    per_category: int | None = None  # cap the split's tasks per category
    steps: int = 10
    # stop after the step past which the next one (at the mean step time so far) would end later than
    # this many seconds from the start of training; the checkpoint is that step's. None: all ``steps``
    max_wall_s: float | None = None
    tasks_per_step: int = 2  # groups per step
    group_size: int = 4  # G rollouts per task
    temperature: float = 1.0
    max_new_tokens: int | None = None  # None: each model call's own budget (the harness decides)
    rollout_batch: int = 0  # episodes played in one lockstep (0: the whole step's G x tasks at once)
    seed: int = 0
    # Tree-GRPO (evolver_grpo.tree): "tree" grows group_size trees per task (M), each by tree_rounds
    # rounds (L) that branch tree_nodes (N) of its non-leaf model calls: G = M·(L·N + 1) rollouts a task
    sampling: Literal["group", "tree"] = "group"
    tree_nodes: int = 2
    tree_rounds: int = 1

    # advantages and rewards
    estimator: str = "grpo"  # grpo, rloo, gdpo, gd2po, dvao, gigpo, taco, tree (sampling "tree"'s default)
    scale_rewards: bool = True  # divide by the group std (False: Dr.GRPO)
    std_floor: float = 1e-4
    rewards: list[str] | None = None  # named rewards to use (default: all the episode reports)
    reward_weights: dict[str, float] = Field(default_factory=dict)
    format_rewards: list[str] = Field(default_factory=list)  # "eos", "regex"
    format_regex: str | None = None
    # steps the online monitor blocked (evolver/monitor.py): "penalise" subtracts monitor_penalty from the
    # episode's score reward, "mask" keeps the rollout but trains none of its blocked steps, "keep" ignores them
    monitor_flags: Literal["penalise", "mask", "keep"] = "penalise"
    monitor_penalty: float = 1.0
    dynamic_sampling: bool = False  # replace zero-variance groups with fresh tasks (DAPO)
    max_resample_rounds: int = 2
    gd2po_mode: str = "hard"
    gd2po_tau: float = 0.8
    gigpo_omega: float = 1.0
    gigpo_gamma: float = 0.95
    taco_alpha: float = 0.1
    taco_lambda: float = 0.5

    # objective
    loss: str = "sequence"  # sequence (GRPO), token (DAPO), constant (Dr.GRPO)
    eps_low: float = 0.2
    eps_high: float = 0.2
    beta: float = 0.02  # KL weight (0: no reference model is kept)
    kl: str = "k3"
    mu: int = 1  # optimizer updates per batch
    lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch: int = 8  # samples per forward/backward
    # samples of a forward sharing this many prompt tokens run them once (0: off): a group of 8
    # completions of one 600-token prompt, forward + backward 4.7x faster (bench/shared_prefix.py)
    share_prefix: int = 64
    logprob_chunk: int = 1024  # completion positions per LM-head chunk
    autocast: bool | None = None  # bf16 autocast (fp32 master weights); None: where bf16 is native
    gradient_checkpointing: bool = False
    # under torchrun / accelerate launch (evolver_training.parallel): "ddp" keeps a whole model per rank,
    # "fsdp" shards weights, gradients and optimizer state over the ranks (a model too big for one device)
    parallel: Literal["ddp", "fsdp"] = "ddp"

    # parameters
    lora: bool = False
    lora_r: int = 8
    lora_alpha: int = 16
    lora_targets: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])

    # engine, checkpoints, evaluation
    engine: str | None = None  # default: the executor role's backend (transformers or vllm)
    save_every: int = 0  # 0: a checkpoint at the end only
    eval_every: int = 0  # 0: evaluate only at the end (if eval_per_category)
    eval_split: str = "dev"
    eval_per_category: int = 0  # 0: no evaluation
    commit: bool = True  # commit the final checkpoint as a program (the proposer commits its own draft)

    # as a proposer in `evolver run --proposer grpo`
    propose_every: int = 1  # train every N iterations (the others propose nothing)
    # train on a parent whose dev score is at least this (0: any); a parent that almost never scores
    # gives groups without a spread, which teach nothing
    min_parent_score: float = Field(0.0, ge=0.0, le=1.0)
    # the share of the loop's search time still left (loop.max_wall_s) that training may take: it sets
    # ``max_wall_s`` where that is lower; under min_wall_s left, the proposer does not train this time
    wall_share: float = Field(0.5, gt=0.0, le=1.0)
    min_wall_s: float = 60.0

    @field_validator("loss", "kl", "estimator")
    @classmethod
    def _known(cls, v: str, info) -> str:
        from evolver_grpo.advantages import ESTIMATORS
        from evolver_grpo.objective import AGGREGATIONS, KL_ESTIMATORS

        known = {"loss": AGGREGATIONS, "kl": KL_ESTIMATORS, "estimator": sorted(ESTIMATORS)}[info.field_name]
        if v not in known:
            raise ValueError(f"choose from {', '.join(known)}")
        return v

    @model_validator(mode="after")
    def _tree_estimator(self) -> "GRPOConfig":
        if self.sampling == "tree" and "estimator" not in self.model_fields_set:
            self.estimator = "tree"  # intra- plus inter-tree advantages, unless another was asked for
        return self

    @field_validator("group_size", "tasks_per_step", "mu", "micro_batch", "steps", "tree_nodes", "tree_rounds")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v


def load(options: dict) -> GRPOConfig:
    return plugin_options(GRPOConfig, options, "grpo")
