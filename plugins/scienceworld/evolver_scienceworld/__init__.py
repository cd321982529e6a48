"""ScienceWorld for evolver: elementary-science tasks (find a living thing, tell the longest-lived
animal, ...) in a text simulator, with partial credit per subgoal. Written against evolver's public
API only, as a third-party benchmark would be; nothing in the core knows it."""
from __future__ import annotations

from evolver import hookimpl

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []

__version__ = "0.1.0"


@hookimpl
def register_benchmarks(register):
    from evolver_scienceworld.benchmark import ScienceWorld

    register("scienceworld", ScienceWorld, "ScienceWorld text simulations (suite sciworld-short: the task types "
             "whose gold path is at most 12 steps); options: suite, tasks, simplification, pool_size")
