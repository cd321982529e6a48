"""GRPO for evolver: skill-augmented RL on the policy model, on CPU (transformers) or GPU (vLLM).

``evolver train`` (trainer ``grpo``, the default) fine-tunes the executor's model with the program's
skills in every prompt; options live under ``[plugins.grpo]`` (see :mod:`evolver_grpo.config`).
"""
from __future__ import annotations

from evolver import hookimpl, lazy_names

__version__ = "0.1.0"

#: What other plugins may use (``from evolver_grpo import GRPOTrainer``), and where each lives. The
#: machinery every trainer shares (engines, log-probs, the optimiser step, checkpoints) is
#: ``evolver_training``'s; SKILLRL's trainer is GRPO with its bank.
_API: dict[str, str] = {
    "GRPOTrainer": "evolver_grpo.trainer",
    "GRPOConfig": "evolver_grpo.config",  # [plugins.grpo]
}
__all__ = list(_API)


__getattr__ = lazy_names(__name__, globals(), _API)  # loaded on first use: no torch at import


def grpo_trainer(run, options: dict | None = None, progress=None):
    """A :class:`evolver_grpo.trainer.GRPOTrainer`, imported when a run builds it: registering the trainer
    imports no torch, so `evolver plugins` and `evolver --help` stay fast."""
    from evolver_grpo.trainer import GRPOTrainer

    return GRPOTrainer(run, options, progress=progress)


grpo_trainer.flag = False  # Trainer.flag, read from the registered factory: GRPO is the plain default


def distill_trainer(run, options: dict | None = None, progress=None):
    """A :class:`evolver_grpo.distill.DistillTrainer` (on-policy self-distillation), imported when built."""
    from evolver_grpo.distill import DistillTrainer

    return DistillTrainer(run, options, progress=progress)


distill_trainer.flag = True  # `evolver train --distill`


def ppo_trainer(run, options: dict | None = None, progress=None):
    """A :class:`evolver_grpo.ppo.PPOTrainer` (PPO with a learned critic), imported when built."""
    from evolver_grpo.ppo import PPOTrainer

    return PPOTrainer(run, options, progress=progress)


ppo_trainer.flag = True  # `evolver train --ppo`


@hookimpl
def register_trainers(register):
    register("grpo", grpo_trainer, description="GRPO and variants (RLOO, GDPO, GD2PO, DVAO, GiGPO, TACO), "
             "step-wise on multi-turn episodes, with the program's skills in the prompt")
    register("distill", distill_trainer, description="on-policy self-distillation: the policy with privileged "
             "context (the skills, a gold answer, a hint) teaches itself without it")
    register("ppo", ppo_trainer, description="PPO with a learned critic (a value head or a separate model): "
             "token-level GAE advantages from single rollouts, every model call of an episode a sample")


@hookimpl
def register_proposers(register):
    from evolver_grpo.proposer import make_proposer

    register("grpo", make_proposer, description="fine-tune the parent's policy with GRPO (its skills in the "
             "prompt) and propose the checkpoint as a candidate: the loop's training step")
    from evolver_grpo.internalise import make_proposer as make_internalise

    register("internalise", make_internalise, description="distil the parent's skills into its policy "
             "(self-distillation, the skills as the teacher's context) and propose it without them")
