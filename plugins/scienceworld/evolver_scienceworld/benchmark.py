"""ScienceWorld (Wang et al., 2022) as an evolver benchmark: each task type is a category, each of its
variations a task, split by ScienceWorld's own train / dev / test variations.

Suites: ``sciworld-short`` holds the task types whose gold path on their first variation is at most 12
steps and that have at least 30 dev variations (a rule, not a choice of what a model does well):
the four find-* tasks and the three lifespan tasks. ``tasks=[...]`` names any of ScienceWorld's 30.

Episodes: one ScienceWorld process (a JVM, ~2 s to start) holds one episode, so the benchmark owns an
``EnvPool`` of ``pool_size`` of them and caps ``max_live`` to it. Scores: ScienceWorld's 0-100 progress
divided by 100; a game it ends with a negative score (focusing on the wrong thing) scores 0. The
simplification is ScienceWorld's "easy" by default (teleporting, open doors and containers).
Demonstrations: ScienceWorld's gold action sequence, generated on demand for training tasks.
"""
from __future__ import annotations

import threading

from evolver import SPLITS, Benchmark, BenchmarkError, EnvPool, Observation, PooledEnv, Task

SUITES = {
    "sciworld-short": ["find-living-thing", "find-non-living-thing", "find-plant", "find-animal",
                       "lifespan-longest-lived", "lifespan-shortest-lived",
                       "lifespan-longest-lived-then-shortest-lived"],
}
DEFAULT_PER_CATEGORY = 30
MIN_STEPS, MAX_STEPS = 12, 40  # a task type's step limit: twice its first gold path, within these


def _start_world():
    try:
        from scienceworld import ScienceWorldEnv
    except ImportError as exc:
        raise BenchmarkError("the scienceworld benchmark needs the scienceworld package: "
                             "pip install -e plugins/scienceworld (and a Java 11+ runtime)") from exc
    try:
        return ScienceWorldEnv("", envStepLimit=10_000)  # the evaluator enforces the step limit
    except Exception as exc:
        raise BenchmarkError(f"ScienceWorld did not start ({exc}); it needs Java 11+: "
                             "apt-get install openjdk-17-jre-headless") from exc


def _alive(world) -> bool:
    return world._gateway.java_process.poll() is None


def _observation(text: str, score: int, done: bool, info: dict) -> Observation:
    won = score >= 100
    lost = score < 0
    return Observation(text.strip(), actions=sorted(set(info.get("valid") or [])) if not (done or lost) else [],
                       score=max(0, score) / 100, done=bool(done or won or lost),
                       info={"won": won, "look": info.get("look", ""), "inventory": info.get("inv", "")})


class WorldEnv(PooledEnv):
    def __init__(self, bench: "ScienceWorld", task: Task):
        super().__init__(bench.pool)
        self.bench, self.task = bench, task

    def begin(self, world) -> Observation:
        world.load(self.task.category, self.task.seed, self.bench.simplification)
        text, info = world.reset()
        return _observation(text, 0, False, info)

    def act(self, world, action: str) -> Observation:
        text, _, done, info = world.step(action)
        return _observation(text, int(info["score"]), done, info)


class _Query(PooledEnv):
    """A lease on a pool worker to read something (a task type's variations, a gold path) rather than play:
    the pool then knows the worker no longer holds the episode it held, and replays that one if needed."""

    brief = True

    def __init__(self, pool: EnvPool, read):
        super().__init__(pool)
        self.read, self.result = read, None

    def begin(self, world) -> Observation:
        self.result = self.read(world)
        return Observation("", done=True)

    def act(self, world, action: str) -> Observation:
        raise BenchmarkError("a query plays no actions")


class ScienceWorld(Benchmark):
    name = "scienceworld"
    harness_hints = {"preset": "text-game"}

    def __init__(self, suite: str = "sciworld-short", tasks: list[str] | None = None, simplification: str = "easy",
                 pool_size: int = 8):
        if tasks is None and suite not in SUITES:
            raise BenchmarkError(f"unknown suite {suite!r}; choose from {sorted(SUITES)} or name task types")
        self.categories = list(tasks or SUITES[suite])
        self.simplification = simplification
        self.pool = EnvPool(_start_world, int(pool_size), alive=_alive)
        self.max_live = int(pool_size)  # one JVM per live episode: sharing one means replaying
        self._meta: dict[str, dict] = {}  # task type -> variations per split and step limit
        self._prompts: dict[tuple[str, int], str] = {}  # (task type, variation) -> its task description
        self._lock = threading.Lock()
        self.max_steps = MAX_STEPS

    def _with_world(self, read):
        query = _Query(self.pool, read)
        try:
            query.reset()
        finally:
            query.close()
        return query.result

    def _type(self, name: str) -> dict:
        with self._lock:
            if name not in self._meta:
                def read(world):
                    if name not in world.get_task_names():
                        raise BenchmarkError(f"unknown ScienceWorld task type {name!r}; known: "
                                             f"{', '.join(world.get_task_names())}")
                    world.load(name, 0, self.simplification, generateGoldPath=True)
                    world.reset()
                    steps = min(MAX_STEPS, max(MIN_STEPS, 2 * len(world.get_gold_action_sequence())))
                    return {"train": list(world.get_variations_train()), "dev": list(world.get_variations_dev()),
                            "test": list(world.get_variations_test()), "steps": steps}
                self._meta[name] = self._with_world(read)
            return self._meta[name]

    def tasks(self, split: str, per_category: int | None = None) -> list[Task]:
        if split not in SPLITS:
            raise BenchmarkError(f"unknown split {split!r}; use train, dev or test")
        out = []
        for name in self.categories:
            meta = self._type(name)
            for i, variation in enumerate(meta[split][:per_category or DEFAULT_PER_CATEGORY]):
                out.append(Task(id=f"scienceworld/{name}/{split}/{variation}", benchmark=self.name, split=split,
                                category=name, seed=variation, prompt=self._prompt(name, variation),
                                max_steps=meta["steps"]))
        return out

    def _prompt(self, name: str, variation: int) -> str:
        key = (name, variation)
        if key not in self._prompts:
            def read(world):
                world.load(name, variation, self.simplification)
                return world.get_task_description().strip()
            self._prompts[key] = self._with_world(read)
        return self._prompts[key]

    def env(self, task: Task) -> WorldEnv:
        return WorldEnv(self, task)

    def demonstration(self, task: Task) -> list[str] | None:
        if task.split != "train":
            return None

        def gold(world):
            world.load(task.category, task.seed, self.simplification, generateGoldPath=True)
            world.reset()
            return [str(a) for a in world.get_gold_action_sequence()]
        return self._with_world(gold) or None

    def close(self) -> None:
        self.pool.close()
