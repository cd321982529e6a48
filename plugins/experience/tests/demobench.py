"""The GRPO tests' letter benchmark with valid actions, and demonstrations of its training tasks
(``demos=False``: a benchmark that offers none)."""
from __future__ import annotations

from letterbench import LetterBench

from evolver.hookspecs import hookimpl


class DemoBench(LetterBench):
    name = "demoletters"

    def __init__(self, demos: bool = True, **kw):
        super().__init__(actions=True, **{"steps": 2, **kw})
        self.demos = demos

    def demonstration(self, task):
        return ["aaaa"] * self.steps if self.demos and task.split == "train" else None


@hookimpl
def register_benchmarks(register):
    register("demoletters", DemoBench, "letters with demonstrations, for the experience plugin's tests")
