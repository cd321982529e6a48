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
- Per-step metrics go to the store's ``train_steps`` table and the ``on_train_step`` hook, both through
  ``run.add_train_steps(rows)``.
- ``train(resume=True)`` continues the run from its newest checkpoint; a trainer that cannot resume
  raises :class:`evolver.EvolverError` saying so.

What ``evolver train`` shows and accepts comes from the trainers, so the core names none of them: a
trainer's :attr:`Trainer.flag` gives it a flag of its own (``evolver train --sft``), read from the
registered factory (register the class itself, or give a factory function the attribute);
:attr:`Trainer.columns` says which metrics each step's progress shows, and :attr:`Trainer.total_steps` the
total it counts to. With no ``--trainer`` and no flag, the config's ``trainer`` runs, else the first
registered trainer without a flag of its own.
"""
from __future__ import annotations

import abc
from typing import Any, Iterable


class Trainer(abc.ABC):
    """Base class of policy trainers (GRPO, SFT, SKILLRL). Subclassing is optional: ``evolver train``
    only calls :meth:`train` on what the registered factory returns (see the module docstring)."""

    #: True: ``evolver train --NAME`` (NAME: the registered name) is short for ``--trainer NAME``, and the
    #: trainer is never the default, which is for a trainer with no flag of its own.
    flag: bool = False

    #: A step's progress after its count (``grpo: 3/8 steps ...``): ``str.format`` templates over its metrics row
    #: (a metric the row lacks reads 0), e.g. ``("loss {loss:.4f}", "{step_s:.1f}s")``. Empty: every
    #: numeric metric as ``name value``.
    columns: tuple[str, ...] = ()

    #: The steps this training runs, once known (it may be set in :meth:`train`, before the first step):
    #: the total of ``evolver train``'s progress bar and its ETA. None: a count without a total.
    total_steps: int | None = None

    @abc.abstractmethod
    def train(self, resume: bool = False) -> dict:
        """Train, commit the result, return the summary (``program``, ``checkpoint``, ``evals``,
        ``history``); ``resume`` continues this run from its newest checkpoint."""

    def close(self) -> None:
        """Release what training holds outside the workspace (a temporary copy of a program): :meth:`train`
        calls it when it returns, and a caller that set a trainer up without training it calls it too. Safe
        to call twice."""


class _Zero(dict):
    def __missing__(self, key: str) -> int:
        return 0


def progress_note(columns: Iterable[str], row: dict) -> str:
    """A step's metrics as its progress shows them: the trainer's :attr:`Trainer.columns` filled from
    ``row`` (none: every numeric metric as ``name value``)."""
    if columns:
        cells = [c.format_map(_Zero(row)) for c in columns]
    else:
        cells = [f"{k} {v:.4g}" for k, v in row.items()
                 if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)]
    return "  ".join(cells)


def flagged(entries: Iterable[Any]) -> list[str]:
    """The names of registered trainers (plugin registry entries) that ask for a flag of their own."""
    return [e.name for e in entries if getattr(e.factory, "flag", False) is True]


def default_trainer(entries: Iterable[Any], configured: str | None) -> str:
    """The trainer ``evolver train`` runs when none is named: the config's ``trainer``, else the first
    registered one without a flag of its own (a flag marks a variant one asks for), else the first."""
    from evolver.errors import EvolverError

    if configured:
        return configured
    entries = list(entries)
    if not entries:
        raise EvolverError("no trainer is registered: install a plugin that registers one (see docs/training.md)")
    plain = [e.name for e in entries if getattr(e.factory, "flag", False) is not True]
    return (plain or [entries[0].name])[0]
