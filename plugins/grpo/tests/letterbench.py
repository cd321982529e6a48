"""A benchmark a tiny random model gets partial credit on: the score is the share of the letter 'a'
in what it writes. Rollouts differ, so groups have reward spread, and a policy can learn it.
``steps`` > 1 makes it multi-turn (the score is the running mean over steps). Tasks of category
"z" always score 0: groups with no reward spread, for the zero-variance accounting. ``tools=True`` makes every
task a tool-calling one: the letters are the argument of a call of ``write`` (one of ACTIONS)."""
from __future__ import annotations

import json

from evolver.benchmarks.base import Benchmark, Env
from evolver.hookspecs import hookimpl
from evolver.types import Observation, Task


ACTIONS = ["aaaa", "bbbb", "abab"]
WRITE = {"type": "function", "function": {"name": "write", "description": "Write letters.", "parameters": {
    "type": "object", "required": ["letters"], "properties": {"letters": {"enum": ACTIONS}}}}}


class LetterEnv(Env):
    def __init__(self, task: Task, steps: int, actions: bool = False):
        self.task, self.steps, self.scores = task, steps, []
        self.actions = list(ACTIONS) if actions else []

    def reset(self) -> Observation:
        return Observation(f"Write letters. Round 1 of {self.steps}.", actions=self.actions)

    def step(self, action: str) -> Observation:
        text = action.strip()
        if self.task.tools and text.startswith("{"):  # a call of write: its letters are what counts
            text = str(json.loads(text).get("arguments", {}).get("letters", ""))
        hit = text.count("a") / len(text) if text else 0.0
        self.scores.append(0.0 if self.task.category == "z" else hit)
        done = len(self.scores) >= self.steps
        score = sum(self.scores) / self.steps
        return Observation(f"Round {len(self.scores) + 1} of {self.steps}." if not done else "Done.",
                           score=score, done=done, actions=[] if done else self.actions,
                           info={"rewards": {"length": 0.0 if self.task.category == "z" else min(len(text), 8) / 8}})


class LetterBench(Benchmark):
    name = "letters"
    def __init__(self, steps: int = 1, categories: list[str] | None = None, actions: bool = False,
                 tools: bool = False, **_):
        self.steps = self.max_steps = int(steps)
        self.tools = [WRITE] if tools else None
        self.actions = actions
        self.categories = list(categories or ["a", "b"])

    def tasks(self, split, per_category=None):
        n = per_category or 3
        return [Task(id=f"letters/{split}/{c}{i}", benchmark="letters", split=split, category=c, seed=i,
                     prompt=f"Write the letter a ({c}{i}).", tools=self.tools)
                for c in self.categories for i in range(n)]

    def env(self, task):
        return LetterEnv(task, self.steps, self.actions)


@hookimpl
def register_benchmarks(register):
    register("letters", LetterBench, "toy benchmark for GRPO tests")


def cli_args(tmp_path, model_dir, monkeypatch) -> list[str]:
    """`evolver` arguments for a workspace in ``tmp_path`` playing this benchmark with ``model_dir`` in
    every role, the grpo plugin and the engine it trains (transformers) loaded, and only they."""
    from evolver import plugins

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVOLVER_PLUGINS", "transformers,grpo")
    plugins.reset()
    roles = ("executor", "proposer", "builder", "judge")
    return ["--plugin", __file__, "--store", str(tmp_path / "store"), "--set=benchmark=letters",
            "--set=benchmark_options={}", *[f"--set=roles.{r}.backend=transformers" for r in roles],
            *[f"--set=roles.{r}.model={model_dir}" for r in roles]]
