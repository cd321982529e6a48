"""reasoning-gym for evolver: single-turn procedural tasks (arithmetic, chain sums, GSM-style word
problems, ...) with exact scoring, offline, split into train/dev/test by seed."""
from __future__ import annotations

from evolver import hookimpl

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []

__version__ = "0.1.0"


@hookimpl
def register_benchmarks(register):
    from evolver_reasoning_gym.benchmark import ReasoningGym

    register("reasoning-gym", ReasoningGym, "reasoning-gym generators (basic_arithmetic, chain_sum, gsm_symbolic, "
             "...), one answer per task, exact scoring; options: datasets, size, seed, configs")
