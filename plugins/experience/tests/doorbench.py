"""A benchmark whose answers are known, for the skill miner's tests: each round a sign names a colour,
and the right move is to open the door of that colour. The right door raises the score, a wrong one
lowers it and ends the game. Colours come from the seed, so dev and test rounds name pairs of colours
and orders that training never showed together."""
from __future__ import annotations

import random

from evolver.benchmarks.base import Benchmark, Env
from evolver.hookspecs import hookimpl
from evolver.types import Observation, Task

COLOURS = ["red", "blue", "green", "yellow", "white", "black", "orange", "purple"]
ROUNDS = 3


class DoorEnv(Env):
    def __init__(self, task: Task):
        rng = random.Random(f"{task.split}-{task.seed}")
        self.signs = [rng.sample(COLOURS, 3) for _ in range(ROUNDS)]  # [named, other, other]
        self.round, self.points = 0, 0

    def _obs(self, text: str, score: float, done: bool = False) -> Observation:
        actions = None
        if not done:
            doors = list(self.signs[self.round])
            random.Random(self.round).shuffle(doors)
            actions = [f"open {c} door" for c in doors] + ["look around"]
            text += f" The sign says: {self.signs[self.round][0]}."
        return Observation(text, actions=actions, score=score, done=done, info={"won": done and score >= 1.0})

    def reset(self) -> Observation:
        return self._obs("You stand before three doors.", 0.0)

    def step(self, action: str) -> Observation:
        named = self.signs[self.round][0]
        if action == "look around":
            return self._obs("Three doors.", self.points / ROUNDS)
        if action == f"open {named} door":
            self.points += 1
            self.round += 1
            done = self.round == ROUNDS
            return self._obs("The door opens. [Your score has gone up.]", self.points / ROUNDS, done)
        return self._obs("Wrong door. [Your score has gone down.]", 0.0, True)


class DoorBench(Benchmark):
    name = "doors"
    max_steps = 6

    def __init__(self, demos: bool = True, **_):
        self.demos = demos
        self.categories = ["doors"]

    def tasks(self, split, per_category=None):
        return [Task(id=f"doors/{split}/{i}", benchmark="doors", split=split, category="doors", seed=i,
                     prompt="Open the door the sign names.") for i in range(per_category or 4)]

    def env(self, task):
        return DoorEnv(task)

    def demonstration(self, task):
        if not self.demos or task.split != "train":
            return None
        env = DoorEnv(task)
        return [f"open {sign[0]} door" for sign in env.signs]


@hookimpl
def register_benchmarks(register):
    register("doors", DoorBench, "open the door the sign names: the skill miner's known answers")
