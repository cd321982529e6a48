"""evolver's training layer: what every trainer of the policy shares, whatever its loss.

- **Rollout engines** (:mod:`evolver_training.engines`): the policy being trained and the engine that
  plays episodes with its current weights (transformers in-process, or vLLM on a GPU).
- **Log-probs** (:mod:`evolver_training.logprobs`): per-token log-probs and hidden states of
  completions, shared prompt prefixes run once.
- **The optimiser step** (:mod:`evolver_training.optim`): AdamW, the learning-rate schedule, exact
  gradient accumulation and clipping; which layers train.
- **Data-parallel ranks** (:mod:`evolver_training.parallel`) under ``torchrun`` (DDP / FSDP).
- **Checkpoints** (:mod:`evolver_training.checkpoint`): HF folders in the workspace, committed as
  programs, and the state resuming needs.
- **SFT on demonstrated steps** (:mod:`evolver_training.sft`): datasets of steps rendered by a
  program's harness and the trainer that imitates them.

The algorithms are other plugins, each its loss and its data: GRPO, PPO and self-distillation
(``evolver-grpo``), DPO (``evolver-preference``), SKILLRL (``evolver-skillrl``), imitation and expert
iteration (``evolver-experience``). This plugin registers nothing; it holds no torch at import.
"""
from __future__ import annotations

from evolver import lazy_names

__version__ = "0.1.0"

#: What other plugins use (``from evolver_training import make_engine``), and where each lives: module, or
#: ``module:attribute`` when the public name differs.
_API: dict[str, str] = {
    **dict.fromkeys(["RolloutBackend", "make_engine", "learner_only"], "evolver_training.engines"),
    **dict.fromkeys(["completion_logprobs", "completion_hidden", "prefix_groups", "split_model", "flat_masks"],
                    "evolver_training.logprobs"),
    **dict.fromkeys(["Optimiser", "lr_at", "freeze_below"], "evolver_training.optim"),
    "Parallel": "evolver_training.parallel",
    "save_checkpoint": "evolver_training.checkpoint:save",
    **dict.fromkeys(["save_step", "save_and_commit", "write_state", "latest_state", "load_weights", "restore"],
                    "evolver_training.checkpoint"),
    **dict.fromkeys(["SFTTrainer", "SFTSample", "samples_from", "demo_tasks", "commit_checkpoint", "commit_write_choice"],
                    "evolver_training.sft"),
    **dict.fromkeys(["SFTOptions", "load_sft"], "evolver_training.options"),
}
__all__ = list(_API)


__getattr__ = lazy_names(__name__, globals(), _API)  # loaded on first use: no torch at import
