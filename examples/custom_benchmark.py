"""A one-file benchmark plugin: reverse a word (single turn, exact match).

Load it with ``--plugin`` (or list the file in ``EVOLVER_PLUGIN_PATH``)::

    evolver --plugin examples/custom_benchmark.py eval --benchmark reverse

A benchmark yields deterministic Tasks per split and makes an Env per task; a single-turn Env ends
after one step. See ``evolver/benchmarks/base.py`` for the contract.
"""
import random

from evolver import SPLITS, Benchmark, Env, Observation, Task, hookimpl

WORDS = ["planet", "garden", "silver", "rocket", "window", "forest", "candle", "bridge", "puzzle", "harbor"]
SPLIT_BASE = {"train": 0, "dev": 10_000, "test": 20_000}  # disjoint seed ranges: splits never share a task


class ReverseEnv(Env):
    def __init__(self, task: Task):
        self.task = task

    def reset(self) -> Observation:
        return Observation(text=self.task.prompt)  # actions=None: the reply is free text

    def step(self, action: str) -> Observation:
        ok = action.strip().strip("'\".").lower() == self.task.gold
        return Observation(text="Correct." if ok else "Incorrect.", score=float(ok), done=True,
                           info={"won": ok})


class ReverseBenchmark(Benchmark):
    name = "reverse"
    categories = ["reverse"]
    max_steps = 1

    def __init__(self, tasks_per_split: int = 20):
        # Options (`--set benchmark_options.tasks_per_split=5`) are named parameters: evolver checks them
        # before a run, an unknown one an error naming the closest.
        self.tasks_per_split = tasks_per_split

    def tasks(self, split: str, per_category: int | None = None) -> list[Task]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}")
        out = []
        for i in range(per_category or self.tasks_per_split):
            seed = SPLIT_BASE[split] + i
            rng = random.Random(seed)
            word = "".join(rng.sample(rng.choice(WORDS), 6))  # a seeded scramble, so most tasks differ
            out.append(Task(id=f"reverse/{split}/{i}", benchmark=self.name, split=split,
                            category="reverse", seed=seed, gold=word[::-1],
                            prompt=f"Write the word '{word}' backwards. Reply with the word only."))
        return out

    def env(self, task: Task) -> Env:
        return ReverseEnv(task)


@hookimpl
def register_benchmarks(register):
    register("reverse", ReverseBenchmark, description="reverse a word (example plugin)")
