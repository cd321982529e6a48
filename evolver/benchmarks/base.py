"""The benchmark interface. A new benchmark is one short file: see examples/custom_benchmark.py.

A benchmark yields ``Task``s per split and makes an ``Env`` per task. Single-turn tasks are envs
that finish after one step. Scores are in 0..1 with partial credit; ``won`` means full success.

Contract:
- ``tasks(split)`` is deterministic for a given configuration: the same ids every call.
- ``train`` / ``dev`` / ``test`` never share a task; ``test`` is only used for final reports.
- ``Env.step`` never raises for a bad action: it returns an observation saying so (score unchanged).
  Only systemic failures (the game engine died) raise ``BenchmarkError``.
"""
from __future__ import annotations

import abc

from evolver.types import Observation, Task

SPLITS = ("train", "dev", "test")


class Env(abc.ABC):
    """One episode's environment: ``reset()``, then ``step(action)`` until an observation says ``done``."""

    @abc.abstractmethod
    def reset(self) -> Observation:
        """Start the episode; the first observation."""

    @abc.abstractmethod
    def step(self, action: str) -> Observation:
        """Apply one action; never raises for a bad action (see the module docstring)."""

    def close(self) -> None:
        pass


class Benchmark(abc.ABC):
    """A source of tasks per split and an environment per task (see the module docstring for the contract).
    Registered with ``register_benchmarks(register)`` as ``factory(**options)``."""

    name: str = "base"
    #: Task categories; training batches are sampled across them.
    categories: list[str] = []
    #: Step limit per episode (the harness may stop earlier).
    max_steps: int = 1
    #: Skills a new program starts with unless the config names its own (``seed_skills``): names of
    #: the skills that ship in evolver's ``skills/`` or paths to skill folders.
    seed_skills: list[str] = []

    @abc.abstractmethod
    def tasks(self, split: str, per_category: int | None = None) -> list[Task]:
        """The split's tasks, deterministic; ``per_category`` caps each category."""

    @abc.abstractmethod
    def env(self, task: Task) -> Env:
        """A fresh environment for one episode of ``task``."""

    def demonstration(self, task: Task) -> list[str] | None:
        """Actions that solve a *training* task, for imitation (``evolver.demonstrations``), or None
        when the benchmark offers none. Default: ``task.gold`` when it is a list of actions."""
        gold = task.gold
        if task.split == "train" and isinstance(gold, list) and gold and all(isinstance(a, str) for a in gold):
            return list(gold)
        return None

    def close(self) -> None:
        pass
