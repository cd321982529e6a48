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

from evolver.types import Observation, Task

SPLITS = ("train", "dev", "test")


class Env:
    def reset(self) -> Observation:
        raise NotImplementedError

    def step(self, action: str) -> Observation:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Benchmark:
    name: str = "base"
    #: Task categories; training batches are sampled across them.
    categories: list[str] = []
    #: Step limit per episode (the harness may stop earlier).
    max_steps: int = 1

    def tasks(self, split: str, per_category: int | None = None) -> list[Task]:
        raise NotImplementedError

    def env(self, task: Task) -> Env:
        raise NotImplementedError

    def close(self) -> None:
        pass
