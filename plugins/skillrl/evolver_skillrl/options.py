"""SKILLRL's options: ``[plugins.skillrl]`` (retrieval, distillation, evolution; read by the select_skills
hook, the ``skillrl`` proposer and the ``skillrl`` trainer) and ``[plugins.sft]`` (the cold-start SFT
trainer: the training layer's SFT options and ``seed_bank``). Override any key with ``--set plugins.skillrl.KEY=VALUE``."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from evolver import plugin_options
from evolver_training import SFTOptions


class SkillRLOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # -- retrieval (the select_skills hook) --------------------------------------------------------
    retrieval: Literal["auto", "on", "off"] = "auto"
    """auto: use SKILLRL retrieval for programs whose skills carry a SKILLRL tier; on: for every
    program; off: never (the core's lexical default picks)."""
    embedder: str = "all-MiniLM-L6-v2"
    """Dense model for retrieval and dedup: the offline all-MiniLM-L6-v2, a sentence-transformers
    folder, or "hashing" (deterministic surface overlap; tests)."""
    top_k: int = 2
    """K: task-specific skills (and lessons) retrieved per task, on top of the general ones."""
    delta: float = 0.25
    """δ: cosine similarity a task-specific skill must exceed to be retrieved."""
    token_budget: int = 400
    """Tokens the retrieved task-specific bodies may take; general skills are always in."""
    same_category: bool = True
    """Retrieve from the task's own category S_k (as SKILLRL); False: from every category."""
    log_retrievals: bool = True
    """Append each decision (chosen, similarities, what was skipped and why) to
    ``<store>/skillrl/retrievals.jsonl``, once per run, program, task and room."""

    # -- distillation ----------------------------------------------------------------------------------
    teacher: str = "executor"
    """The role whose backend distils trajectories (the policy itself by default: executor), or
    "rules" (a deterministic distiller that abstracts action patterns; no model call)."""
    teacher_max_tokens: int = 300
    """Output budget of one teacher answer."""
    repair: bool = True
    """One repair call for an answer that fails the schema (the errors are shown to the teacher)."""
    max_steps_shown: int = 20
    """Trajectory steps shown to the teacher (observations are cut to 200 characters)."""

    # -- the bank and its evolution --------------------------------------------------------------------
    seed_from_gold: bool = True
    """Seed an empty bank from the benchmark's gold trajectories of training tasks (twx has them)."""
    gold_per_category: int = 3
    """Training tasks per category whose gold trajectories seed the bank."""
    category_threshold: float = 0.8
    """Evolve the bank for each category whose validation score is below this."""
    new_per_category: int = 2
    """At most this many new skills/lessons per weak category per evolution."""
    failures_per_category: int = 4
    """Failed training trajectories distilled per weak category."""
    dedup_threshold: float = 0.9
    """A new skill this similar (cosine) to one already in the bank, or to another new one, is dropped."""
    max_bank: int = 40
    """Most skills a bank may hold (the core's cap is 50); evolution stops adding beyond it."""
    tolerance: float = 0.0
    """Trainer: an evolved bank is kept when the next validation is at least the previous minus this."""
    evolve_every: int = 1
    """Trainer: evolve after every N-th validation."""

    @field_validator("top_k", "token_budget", "gold_per_category", "new_per_category", "failures_per_category",
                     "max_bank", "evolve_every")
    @classmethod
    def _non_negative(cls, v: int) -> int:
        if v < 0:
            raise ValueError("must be 0 or more")
        return v

    @field_validator("delta", "dedup_threshold")
    @classmethod
    def _cosine(cls, v: float) -> float:
        if not -1.0 <= v <= 1.0:
            raise ValueError("a cosine similarity is between -1 and 1")
        return v


class SkillSFTOptions(SFTOptions):
    """``[plugins.sft]``: the training layer's SFT options (:class:`evolver_training.SFTOptions`) and SKILLRL's
    own."""

    seed_bank: bool = True
    """Seed the bank from gold first when the program has none (a commit), so prompts hold skills."""


def _grpo_fields() -> set[str]:
    from evolver_grpo import GRPOConfig

    return set(GRPOConfig.model_fields)


def grpo_part(raw: dict) -> dict:
    """The GRPO options written under ``[plugins.skillrl]`` (``evolver train --skillrl --steps N`` puts
    ``steps`` there); they override ``[plugins.grpo]`` for the skillrl trainer."""
    fields = _grpo_fields()
    return {k: v for k, v in (raw or {}).items() if k in fields and k not in SkillRLOptions.model_fields}


def load_options(config_or_dict) -> SkillRLOptions:
    """From a Config (its ``[plugins.skillrl]``) or a plain dict of options; GRPO keys are left to the trainer."""
    raw = config_or_dict if isinstance(config_or_dict, dict) else \
        (getattr(config_or_dict, "plugins", None) or {}).get("skillrl", {})
    own = {k: v for k, v in (raw or {}).items() if k not in grpo_part(raw)}
    return plugin_options(SkillRLOptions, own, "skillrl")
