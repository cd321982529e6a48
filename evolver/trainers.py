"""The trainer interface: a program's policy in, new weights committed as a child program out.

A trainer is registered with ``register_trainers(register)`` as ``factory(run, options, progress=None)``
and runs with ``evolver train --trainer NAME``:

- ``run`` is the training run (:class:`evolver.Run`): its executor role names the model to train, its
  ``benchmark`` the tasks, its ``store`` and ``repo`` where metrics, episodes and the checkpoint go;
- ``options`` is the config's ``[plugins.NAME]`` table (validate it in the constructor, so a bad option
  fails before any work);
- ``progress(row)``, when given, is called once per step with that step's metrics (``step``, and e.g.
  ``loss`` or ``reward_mean``).

Contract:
- ``train()`` returns a summary dict: ``program`` (the id of the program committed with the new
  checkpoint, or None when nothing was committed), ``checkpoint`` (its weights folder), ``evals``
  (held-out scores, ``[{"step": n, "score": ..., ...}]``) and ``history`` (the per-step metric rows);
  other keys are kept in the run's summary.
- Checkpoints are HF folders in the workspace, each committed as a program whose manifest ``model``
  points at it (:meth:`evolver.Run.commit_child`), so ``evolver eval --program ID`` plays the new weights.
- Per-step metrics go to the store's ``train_steps`` table (``run.store.add_train_steps``).
- ``train(resume=True)`` continues the run from its newest checkpoint; a trainer that cannot resume
  raises :class:`evolver.EvolverError` saying so.
"""
from __future__ import annotations

import abc


class Trainer(abc.ABC):
    """Base class of policy trainers (GRPO, SFT, SKILLRL). Subclassing is optional: ``evolver train``
    only calls :meth:`train` on what the registered factory returns (see the module docstring)."""

    @abc.abstractmethod
    def train(self, resume: bool = False) -> dict:
        """Train, commit the result, return the summary (``program``, ``checkpoint``, ``evals``,
        ``history``); ``resume`` continues this run from its newest checkpoint."""
