"""DPO and Step-DPO options: ``[plugins.dpo]`` and ``[plugins.step-dpo]`` (the same keys), or
``--set plugins.dpo.KEY=VALUE``."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evolver import plugin_options


class DPOConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # where the pairs come from (mining.py)
    runs: list[str] = Field(default_factory=list)
    """Runs whose episodes are mined (empty: every run in the store)."""
    programs: list[str] = Field(default_factory=list)
    """Programs (ids) whose episodes are mined (empty: every program)."""
    split: str | None = "train"
    """Split the episodes were played on; dev and test stay held out (None: any)."""
    purposes: list[str] | None = None
    """Episode purposes to mine (``eval``, ``train``, ``grpo``, ...; None: any)."""
    min_gap: float = 0.0
    """A pair's scores differ by more than 0 and at least this much."""
    max_pairs_per_task: int | None = 4
    """Pairs kept per task, the widest score gaps first (None: all): a task played often does not swamp the rest."""
    max_prompt_tokens: int = 2048
    """Pairs with a longer prompt are dropped (counted in the summary)."""

    # the objective
    beta: float = 0.1
    """Strength of the KL anchor to the reference: the implicit reward is beta * log(pi / pi_ref)."""
    label_smoothing: float = 0.0
    """cDPO: the share of pairs assumed mislabelled, in [0, 0.5); 0 is plain DPO."""

    # the optimisation
    program: str = "seed"
    """The program the checkpoint is committed as a child of (its skills and harness go with it)."""
    steps: int | None = None
    """Optimizer steps (None: ``epochs`` passes over the pairs)."""
    epochs: int = 1
    batch_size: int = 8
    """Pairs per optimizer step."""
    micro_batch: int = 4
    """Pairs per forward/backward (both sides of a pair run together, sharing their prompt)."""
    lr: float = 1e-6
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    seed: int = 0
    share_prefix: int = 64
    """Completions sharing this many prompt tokens run them once (0: off), as in the GRPO trainer."""
    logprob_chunk: int = 1024
    autocast: bool | None = None
    """bf16 autocast (fp32 master weights); None: where bf16 is native."""
    lora: bool = False
    """Train LoRA adapters only (merged into the saved checkpoint)."""
    lora_r: int = 8
    lora_alpha: int = 16
    lora_targets: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])

    # engine, checkpoint, evaluation
    engine: str | None = None
    """The learner's engine (default: the executor role's backend, transformers or vllm)."""
    eval_per_category: int = 0
    """Tasks per category played on ``eval_split`` before and after training (0: none)."""
    eval_every: int = 0
    """Also evaluate after every N steps (0: only before and after training)."""
    eval_split: str = "dev"
    commit: bool = True
    """Commit the checkpoint as a child program of ``program``."""

    @field_validator("batch_size", "micro_batch", "epochs")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v

    @field_validator("label_smoothing")
    @classmethod
    def _smoothing(cls, v: float) -> float:
        if not 0 <= v < 0.5:
            raise ValueError("must be in [0, 0.5): the share of pairs assumed mislabelled (0: plain DPO)")
        return v

    @field_validator("beta")
    @classmethod
    def _beta(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be above 0 (try 0.1)")
        return v


def load(options: dict, name: str = "dpo") -> DPOConfig:
    return plugin_options(DPOConfig, options, name)
