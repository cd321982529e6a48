"""The SFT trainer's options (``[plugins.sft]``, or the section of the proposer that trains with it:
imitation, expert iteration and the skill miner take SFT keys in their own tables)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evolver import plugin_options


class SFTOptions(BaseModel):
    """The ``[plugins.sft]`` options, validated: each field's docstring says what it does."""

    model_config = ConfigDict(extra="forbid")

    program: str = "seed"
    """Program whose harness renders the prompts (its skills in them)."""
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
    completion (``evolver_training.logprobs``): several times less work a step; the weights learn how the
    completion reads the prompt, not how the prompt is encoded."""
    commit: bool = True
    """Commit the checkpoint as a child program; False: only save it (a proposer commits it as its draft)."""
    min_score: float = 1.0
    """source=store: an episode must have scored at least this to count as successful."""
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
    same loss and gradients (``evolver_training.logprobs``); 0: every sample in a row of its own. On
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
    """Under ``torchrun`` / ``accelerate launch`` (``evolver_training.parallel``): ddp keeps a whole model per
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


def load_sft(raw: dict, model: type[SFTOptions] = SFTOptions, section: str = "sft") -> SFTOptions:
    """``model`` (:class:`SFTOptions` or a subclass) from ``raw`` (the ``[plugins.<section>]`` table); a
    bad value is a ConfigError naming the section."""
    return plugin_options(model, raw, section)
