"""SKILLRL for evolver: skills inside the RL loop.

- a hierarchical SkillBank (general / task-specific / failure lessons) as Agent Skills folders in the
  program repository, every change a commit (:mod:`evolver_skillrl.bank`);
- retrieval through the ``select_skills`` hook: general skills always, task-specific ones by embedding
  similarity, top-K above δ, within a token budget (:mod:`evolver_skillrl.retrieval`);
- distillation of trajectories from the trace store by a teacher backend (the policy by default),
  schema-checked with one repair call (:mod:`evolver_skillrl.distill`); gold paths seed the bank;
- ``evolver train --sft``: cold-start SFT on skill-conditioned gold steps (:mod:`evolver_skillrl.sft`, the
  training layer's SFT with a bank seeded first);
- ``evolver run --proposer skillrl``: recursive bank evolution from failed training trajectories
  (:mod:`evolver_skillrl.proposer`); ``evolver train --skillrl``: GRPO with it (:mod:`evolver_skillrl.trainer`).

Imports are lazy, so loading the plugin costs ``evolver --help`` nothing.
"""
from __future__ import annotations

import threading

from evolver import hookimpl, lazy_names

__version__ = "0.1.0"

#: What other plugins may use, and where each lives: SKILLRL's cold-start SFT (the training layer's SFT
#: that seeds a skill bank first).
_API: dict[str, str] = {
    "SkillSFTTrainer": "evolver_skillrl.sft",
    "SkillSFTOptions": "evolver_skillrl.options",
}
__all__ = list(_API)


__getattr__ = lazy_names(__name__, globals(), _API)  # loaded on first use: no torch at import


_RETRIEVERS: dict[tuple, object] = {}
_LOCK = threading.Lock()


@hookimpl
def register_commands(cli):
    from evolver_skillrl.cli import skillrl_group

    cli.add_command(skillrl_group)


def _lazy_trainer(module: str, cls: str, flag: bool):
    """A factory that imports ``module.cls`` (and so torch) only when a run builds the trainer; ``flag`` is
    the class's :attr:`evolver.Trainer.flag`, which `evolver train` reads from the registered factory."""
    def factory(run, options: dict | None = None, progress=None):
        import importlib

        return getattr(importlib.import_module(module), cls)(run, options, progress=progress)
    factory.__qualname__ = factory.__name__ = f"{cls}_factory"
    factory.__doc__ = f"A :class:`{module}.{cls}`, imported when built."
    factory.flag = flag
    return factory


@hookimpl
def register_trainers(register):
    register("sft", _lazy_trainer("evolver_skillrl.sft", "SkillSFTTrainer", flag=True),
             description="SKILLRL cold-start SFT: skill-conditioned gold steps rendered by the program's harness")
    register("skillrl", _lazy_trainer("evolver_skillrl.trainer", "SkillRLTrainer", flag=True),
             description="SKILLRL: GRPO with the skill bank in every prompt and "
             "recursive bank evolution from training failures")


@hookimpl
def register_proposers(register):
    from evolver_skillrl.proposer import make_proposer

    register("skillrl", make_proposer, description="SKILLRL bank evolution: seed from gold, lessons from failed "
             "training trajectories of weak categories, deduplicated")


@hookimpl
def select_skills(run, task, program, skills, k):
    """General skills always, then the task's category's skills and lessons by similarity (top-K > δ,
    token budget). Active for programs holding a SkillBank (``retrieval = "auto"``), all ("on") or none."""
    if run is None or not skills:
        return None
    from evolver_skillrl.bank import bank_of
    from evolver_skillrl.options import load_options

    opts = load_options(run.config)
    if opts.retrieval == "off" or (opts.retrieval == "auto" and not bank_of(skills)):
        return None
    from evolver import load_embedder
    from evolver_skillrl.retrieval import Retriever

    key = (program.hash, opts.embedder, opts.top_k, opts.delta, opts.token_budget, opts.same_category)
    with _LOCK:
        retriever = _RETRIEVERS.get(key)
        if retriever is None:
            retriever = Retriever(skills, load_embedder(opts.embedder, fallback=False), top_k=opts.top_k, delta=opts.delta,
                                  token_budget=opts.token_budget, same_category=opts.same_category)
            if len(_RETRIEVERS) > 64:
                _RETRIEVERS.clear()
            _RETRIEVERS[key] = retriever
    found = retriever.retrieve(task, k)
    if opts.log_retrievals:
        from evolver_skillrl.retrieval_log import record

        record(run, program, task, k, found)
    return found.skills
