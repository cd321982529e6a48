"""A toy benchmark with gold paths, for SKILLRL tests: follow a short path of actions.

Each task's gold is a list of 3 actions; every step lists the next gold action among distractors
(sorted, so position gives nothing away). The score is the share of the path done; a wrong action
ends the game (lost). Categories ``doors`` and ``boxes`` have their own verbs, so skills can differ.
"""
from __future__ import annotations

from evolver.benchmarks.base import Benchmark, Env
from evolver.hookspecs import hookimpl
from evolver.types import Observation, Task

VERBS = {"doors": ["open door", "go north", "take key"], "boxes": ["open box", "take coin", "close box"]}
# Each split has its own words, so a test can tell whether dev or test text reached a prompt.
COLOURS = {"train": ["red", "blue", "green", "white", "black", "pink", "gold", "grey", "teal", "plum"],
           "dev": ["amber", "coral", "ivory", "lilac", "mauve", "ochre"],
           "test": ["azure", "beige", "cyan", "khaki", "lemon", "olive"]}


class PathEnv(Env):
    def __init__(self, task: Task):
        self.task, self.done_steps, self.lost = task, 0, False

    def _obs(self, text: str) -> Observation:
        gold = self.task.meta["path"]
        done = self.lost or self.done_steps >= len(gold)
        actions = [] if done else sorted({gold[self.done_steps], "look around", "wait", "inventory"})
        return Observation(text, actions=actions, score=self.done_steps / len(gold), done=done,
                           info={"won": self.done_steps >= len(gold)})

    def reset(self) -> Observation:
        return self._obs(f"You are in a room. {self.task.prompt}")

    def step(self, action: str) -> Observation:
        gold = self.task.meta["path"]
        if action.strip() == gold[self.done_steps]:
            self.done_steps += 1
            return self._obs("Done." if self.done_steps >= len(gold) else "That worked.")
        self.lost = True
        return self._obs("Wrong move: the game is over.")


class PathBench(Benchmark):
    name = "paths"
    max_steps = 5

    def __init__(self, categories: list[str] | None = None, **_):
        self.categories = list(categories or VERBS)

    def tasks(self, split, per_category=None):
        out = []
        for cat in self.categories:
            for i in range(per_category or 3):
                colour = COLOURS[split][i % len(COLOURS[split])]
                path = [v.replace(v.split()[-1], f"{colour} {v.split()[-1]}") for v in VERBS[cat]]
                out.append(Task(id=f"paths/{cat}/{split}/{i}", benchmark="paths", split=split, category=cat, seed=i,
                                prompt=f"Goal: use the {colour} things in order ({cat}).", gold=path,
                                meta={"path": path, "description": f"Use the {colour} things in order."}))
        return out

    def env(self, task):
        return PathEnv(task)


@hookimpl
def register_benchmarks(register):
    register("paths", PathBench, "toy benchmark with gold paths for SKILLRL tests")
