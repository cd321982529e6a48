"""Gymnasium environments as evolver benchmarks, from the configuration alone (no plugin file):

    benchmark = "gym"
    benchmark_options = { env = "FrozenLake-v1", kwargs = { is_slippery = false },
                          action_names = ["move left", "move down", "move right", "move up"] }
"""
from __future__ import annotations

from evolver import hookimpl

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []

__version__ = "0.1.0"


@hookimpl
def register_benchmarks(register):
    from evolver_gymnasium.benchmark import GymBenchmark

    register("gym", GymBenchmark, "any Gymnasium environment with text observations (or an ANSI rendering) and "
             "text or named discrete actions; options: env, kwargs, action_names, task, score_range, max_steps")
