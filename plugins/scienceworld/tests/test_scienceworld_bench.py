"""ScienceWorld through evolver's benchmark contract: splits, gold paths that win, a lost game scoring 0,
and episodes that share the pool's JVMs replaying to the same states. Needs Java (skipped without)."""
import random
import shutil

import pytest

pytest.importorskip("scienceworld")
pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="ScienceWorld needs a Java runtime")

from evolver import BenchmarkError  # noqa: E402
from evolver_scienceworld.benchmark import ScienceWorld  # noqa: E402

TYPES = ["find-living-thing", "lifespan-longest-lived"]


@pytest.fixture(scope="module")
def world():
    bench = ScienceWorld(tasks=TYPES, pool_size=2)
    yield bench
    bench.close()


def test_splits_are_disjoint_deterministic_and_say_the_task(world):
    ids = {s: [t.id for t in world.tasks(s, 3)] for s in ("train", "dev", "test")}
    assert all(len(v) == 6 for v in ids.values())
    assert not (set(ids["train"]) & set(ids["dev"]) or set(ids["dev"]) & set(ids["test"]))
    assert [t.id for t in world.tasks("dev", 3)] == ids["dev"]
    task = world.tasks("dev", 1)[0]
    assert task.gold is None and "Your task is to" in task.prompt and 12 <= task.max_steps <= 40


def test_a_demonstration_wins_and_a_wrong_focus_loses_with_zero(world):
    task = world.tasks("train", 1)[0]
    demo = world.demonstration(task)
    env = world.env(task)
    obs = env.reset()
    assert obs.actions and not obs.done and obs.info["look"]
    scores = []
    for action in demo:
        obs = env.step(action)
        scores.append(obs.score)
    assert obs.done and obs.info["won"] and obs.score == 1.0 and 0 < scores[0] < 1
    env.close()
    assert world.demonstration(world.tasks("dev", 1)[0]) is None  # only training tasks are demonstrated
    # Focusing on the wrong thing ends the game with a negative score in ScienceWorld: here, 0.
    lost = None
    for target in [a for a in world.env(task).reset().actions if a.startswith("focus on ")][:12]:
        env = world.env(task)
        env.reset()
        obs = env.step(target)
        env.close()
        if obs.done and not obs.info["won"]:
            lost = obs
            break
    assert lost is not None and lost.score == 0.0 and lost.actions == []


def test_episodes_sharing_the_pool_replay_to_the_same_states(world):
    tasks = world.tasks("dev", 2)[:3]  # three live episodes on two JVMs
    rng = random.Random(0)
    plays = [[rng.randrange(10_000) for _ in range(4)] for _ in tasks]

    sequential = []
    for task, picks in zip(tasks, plays):
        env = world.env(task)
        obs, seen = env.reset(), []
        for p in picks:
            obs = env.step(obs.actions[p % len(obs.actions)] if obs.actions else "look around")
            seen.append(obs.text)
        sequential.append(seen)
        env.close()
    envs = [world.env(t) for t in tasks]
    last = [env.reset() for env in envs]
    interleaved = [[] for _ in envs]
    for k in range(4):
        for i, env in enumerate(envs):
            obs = last[i]
            last[i] = env.step(obs.actions[plays[i][k] % len(obs.actions)] if obs.actions else "look around")
            interleaved[i].append(last[i].text)
    for env in envs:
        env.close()
    assert interleaved == sequential


def test_unknown_names_fail_before_any_play():
    with pytest.raises(BenchmarkError, match="unknown suite"):
        ScienceWorld(suite="sciworld-everything")
    bench = ScienceWorld(tasks=["find-a-unicorn"], pool_size=1)
    try:
        with pytest.raises(BenchmarkError, match="unknown ScienceWorld task type"):
            bench.tasks("dev", 1)
    finally:
        bench.close()
