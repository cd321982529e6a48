"""SKILLRL's options: ``[plugins.skillrl]`` (retrieval, distillation, evolution; read by the select_skills
hook, the ``skillrl`` proposer and the ``skillrl`` trainer) and ``[plugins.sft]`` (the cold-start SFT
trainer). Override any key with ``--set plugins.skillrl.KEY=VALUE``."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evolver import plugin_options


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


class SFTOptions(BaseModel):
    """The ``[plugins.sft]`` options, validated: each field's docstring says what it does."""

    model_config = ConfigDict(extra="forbid")

    program: str = "seed"
    """Program whose harness renders the prompts and whose skill bank conditions them."""
    source: Literal["gold", "store", "both"] = "gold"
    """gold: the benchmark's gold trajectories of training tasks; store: successful training
    episodes already in the trace store (teacher rollouts); both."""
    split: Literal["train"] = "train"
    """Only training tasks: SFT data never comes from dev or test."""
    per_category: int = 20
    """Training tasks per category whose trajectories become SFT data."""
    first_task: int = 0
    """Skip this many training tasks per category first (imitation takes a new slice each round)."""
    train_layers: int | None = None
    """Train only the top N decoder layers (and the final norm); None: the whole model. The backward
    pass stops at the lowest trained layer."""
    detach_prompt: bool = False
    """Compute each prompt's keys and values without a graph, so the backward pass covers only the
    completion (``evolver_grpo.logprobs``): several times less work a step; the weights learn how the
    completion reads the prompt, not how the prompt is encoded."""
    commit: bool = True
    """Commit the checkpoint as a child program; False: only save it (a proposer commits it as its draft)."""
    min_score: float = 1.0
    """source=store: an episode must have scored at least this to count as successful."""
    seed_bank: bool = True
    """Seed the bank from gold first when the program has none (a commit), so prompts hold skills."""
    epochs: int = 1
    batch_size: int = 8
    micro_batch: int = 2
    """Samples per forward/backward (gradients accumulate exactly over the batch): peak memory grows
    with it, from the activations of prompts of up to ``max_prompt_tokens`` tokens. With
    ``share_prefix`` a forward holds as many tokens as this many of the batch's longest samples would,
    so more samples sharing a prefix fit in one."""
    batch_by: Literal["sample", "episode"] = "sample"
    """sample: each batch is drawn from all samples shuffled; episode: a batch holds consecutive
    steps of episodes taken in shuffled order, so its samples share more of their prompts (system
    prompt, skills, task) for ``share_prefix`` to run once. On twx-easy with the seed harness that
    computed 39% fewer tokens than rows of their own instead of 29%, yet was no faster, and its
    batches are correlated (``bench/shared_prefix.py``)."""
    share_prefix: int = 64
    """Samples of a forward sharing a prompt prefix of at least this many tokens run it once, with the
    same loss and gradients (``evolver_grpo.logprobs``); 0: every sample in a row of its own. On
    twx-easy gold steps: 1.07x faster steps, 10% less peak memory (``bench/shared_prefix.py``)."""
    lr: float = 3e-5
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """The learning rate over the optimizer steps after warm-up: held, or decayed to 0 linearly or
    along a half cosine."""
    warmup: float = Field(0.0, ge=0.0, lt=1.0)
    """Fraction of the optimizer steps over which the learning rate rises linearly from 0 to ``lr``."""
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    autocast: bool | None = None
    """bf16 autocast with fp32 master weights; None: where the hardware computes bf16 natively
    (fastest there; emulated bf16 on an AVX2-only CPU is slower than fp32, ``bench/dtype_choice.py``)."""
    max_prompt_tokens: int = 1536
    """Samples with longer prompts are dropped (counted)."""
    logprob_chunk: int = 1024
    seed: int = 0
    steps: int | None = None
    """Stop after this many optimizer steps (None: the whole data set, ``epochs`` times)."""
    save_every: int = 20
    """Keep a resumable state (weights, optimizer, RNG) every this many steps, so ``evolver train --sft
    --resume`` goes on from there (0: none)."""
    engine: str | None = None
    parallel: Literal["ddp", "fsdp"] = "ddp"
    """Under ``torchrun`` / ``accelerate launch`` (``evolver_grpo.parallel``): ddp keeps a whole model per
    rank; fsdp shards weights, gradients and optimizer state over the ranks (a model too big for one device)."""
    write_choice: bool = True
    """Train and commit with the harness choosing by writing an action and playing the nearest valid
    one (the default harness's ``WRITE_CHOICE``, on in the seed), as the model is trained to: after SFT
    it scores 0.44 so vs 0.29 ranking by likelihood (24 twx-easy dev episodes). A program whose harness
    ranks gets the switch as its own commit."""
    eval_split: Literal["dev", "test"] = "dev"
    eval_per_category: int = 0
    """Evaluate before and after on this many tasks per category of ``eval_split`` (0: no evaluation)."""

    @field_validator("per_category", "epochs", "batch_size", "micro_batch")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v


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


def load_sft(raw: dict) -> SFTOptions:
    """:class:`SFTOptions` from ``raw`` (the ``[plugins.sft]`` table); a bad value is a ConfigError."""
    return plugin_options(SFTOptions, raw, "sft")

