"""Preference training from the trace store, and the store's traces as training datasets.

- ``evolver train --dpo``: DPO on pairs of episodes of one task with different scores (the whole
  trajectory is the completion); ``evolver train --step-dpo``: Step-DPO on the first step where a
  worse episode left a better one's path. Options under ``[plugins.dpo]`` / ``[plugins.step-dpo]``
  (:mod:`evolver_preference.config`); the loop: :mod:`evolver_preference.trainer`; the pairs:
  :mod:`evolver_preference.mining`.
- ``evolver export --format sft|preference|grpo --out FILE``: JSONL or parquet in TRL's dataset
  formats (:mod:`evolver_preference.export`). It lives here, not in the core, because its preference
  rows are this plugin's mined pairs and the core keeps no training-data formats.

Imports are lazy: registering costs ``evolver --help`` no torch.
"""
from __future__ import annotations

from evolver import hookimpl

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []

__version__ = "0.1.0"


def _lazy(cls: str):
    def factory(run, options: dict | None = None, progress=None):
        from evolver_preference import trainer

        return getattr(trainer, cls)(run, options, progress=progress)
    factory.__qualname__ = factory.__name__ = f"{cls}_factory"
    factory.__doc__ = f"A :class:`evolver_preference.trainer.{cls}`, imported when built."
    factory.flag = True  # `evolver train --dpo` / `--step-dpo`; never the default trainer
    return factory


@hookimpl
def register_trainers(register):
    register("dpo", _lazy("DPOTrainer"), description="DPO on pairs of episodes of one task with different "
             "scores, mined from the trace store (the trajectory is the completion)")
    register("step-dpo", _lazy("StepDPOTrainer"), description="Step-DPO: the state where a worse episode left a "
             "better one's path, the two actions there as chosen and rejected")


@hookimpl
def register_commands(cli):
    from evolver_preference.export import export_cmd

    cli.add_command(export_cmd)
