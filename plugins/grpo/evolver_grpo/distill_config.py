"""On-policy self-distillation options: ``[plugins.distill]`` in evolver.toml, or ``--set plugins.distill.KEY=VALUE``.

The proposer ``internalise`` takes the same keys under ``[plugins.internalise]``, plus ``every``.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evolver import plugin_options


class DistillConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # what to train on
    program: str = "seed"
    """The program whose policy is trained (any program ref: seed, best, an id)."""
    privileged: Literal["skills", "gold", "hint"] = "skills"
    """What the teacher sees and the student does not. ``skills``: the student plays the program without
    its skills and the teacher's system message is the one the program renders with them; ``gold``: the
    task's gold answer or action sequence (training tasks only) appended to the teacher's system message;
    ``hint``: the task's ``hints["hint"]`` (or ``meta["hint"]``) text, appended the same way. A sample
    whose task has no privileged text is not trained on (its teacher would be the student)."""
    divergence: Literal["forward", "reverse", "jsd"] = "reverse"
    """Per completion token, over the whole vocabulary: ``forward`` KL(teacher || student) (mass-covering),
    ``reverse`` KL(student || teacher) (mode-seeking; SDFT's choice), ``jsd`` the generalised
    Jensen-Shannon divergence with weight ``jsd_beta``. The loss is its mean over the student's tokens."""
    jsd_beta: float = Field(0.5, gt=0.0, lt=1.0)
    """JSD's mixture weight: M = beta * teacher + (1 - beta) * student, loss beta KL(T||M) + (1-beta) KL(S||M)."""
    drop_skills: bool = True
    """With ``privileged = "skills"``: the committed program has no skills (they are in the weights now),
    so its context is shorter; False keeps the parent's files."""
    split: str = "train"
    per_category: int | None = None
    """Cap the split's tasks per category."""
    steps: int = 10
    tasks_per_step: int = 2
    samples_per_task: int = 2
    """Student rollouts per task and step (at ``temperature``, each its own seed)."""
    temperature: float = 1.0
    max_new_tokens: int | None = None
    """None: each model call's own budget (the harness decides)."""
    rollout_batch: int = 0
    """Episodes played in one lockstep (0: the whole step's at once)."""
    seed: int = 0

    # optimisation
    lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch: int = 8
    """Samples per forward/backward (the teacher's forward runs the same micro-batch, without a graph)."""
    share_prefix: int = 64
    """Samples sharing this many prompt tokens run them once (0: off); see ``evolver_training.logprobs``."""
    logprob_chunk: int = 256
    """Completion positions per LM-head chunk: only a chunk's [positions, vocabulary] logits exist at a time,
    recomputed in the backward pass."""
    autocast: bool | None = None
    """bf16 autocast (fp32 master weights); None: where bf16 is native."""
    lora: bool = False
    lora_r: int = 8
    lora_alpha: int = 16
    lora_targets: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])

    # engine, checkpoint, evaluation
    engine: str | None = None
    """Default: the executor role's backend (transformers or vllm)."""
    eval_split: str = "dev"
    eval_per_category: int = 0
    """Greedy evaluation of the student program before and after training (0: none)."""
    commit: bool = True
    """Commit the final checkpoint as a program (the proposer commits its own draft)."""

    @field_validator("steps", "tasks_per_step", "samples_per_task", "micro_batch")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v

    @model_validator(mode="after")
    def _gold_on_training_tasks(self):
        if self.privileged == "gold" and self.split != "train":
            raise ValueError(f"privileged = 'gold' reads the gold of the tasks trained on: split must be "
                             f"'train', not {self.split!r} (gold of held-out tasks would leak into the weights)")
        return self


def load(options: dict, section: str = "distill", model: type[BaseModel] = DistillConfig):
    return plugin_options(model, options, section)
