"""Benchmarks: basic and the custom-benchmark example. twx is tested with its plugin (plugins/twx/tests)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from evolver.benchmarks.basic import BasicBenchmark
from evolver.errors import EvolverError

ROOT = Path(__file__).resolve().parents[1]


# -- basic --------------------------------------------------------------------------------------
def test_basic_deterministic_and_disjoint_splits():
    a, b = BasicBenchmark(), BasicBenchmark()
    for split in ("train", "dev", "test"):
        assert [dataclasses.asdict(t) for t in a.tasks(split, 20)] == \
               [dataclasses.asdict(t) for t in b.tasks(split, 20)]
    ids = {s: {t.id for t in a.tasks(s, 200)} for s in ("train", "dev", "test")}
    seeds = {s: {(t.category, t.seed) for t in a.tasks(s, 200)} for s in ("train", "dev", "test")}
    assert not (ids["train"] & ids["dev"]) and not (ids["dev"] & ids["test"])
    assert not (seeds["train"] & seeds["dev"]) and not (seeds["train"] & seeds["test"])
    assert a.tasks("dev", 1)[0].id == "basic/arithmetic/dev/0"
    assert {t.category for t in a.tasks("dev")} == {"arithmetic", "units", "kb-hops"}
    assert len(a.tasks("dev")) == 150


def test_basic_single_turn_exact_match():
    bench = BasicBenchmark(categories=["arithmetic", "units"])
    for task in bench.tasks("dev", 50):
        env = bench.env(task)
        obs = env.reset()
        assert obs.actions is None and obs.text == task.prompt
        won = env.step(f"Let me think... the answer is {task.gold}.")
        assert won.done and won.score == 1.0 and won.info["won"], task.id
        env = bench.env(task)
        env.reset()
        wrong = env.step(str(float(task.gold) + 1))
        assert wrong.done and wrong.score == 0.0
        env = bench.env(task)
        env.reset()
        assert env.step("no idea").score == 0.0


def test_basic_units_accepts_unrounded_exact_value():
    bench = BasicBenchmark(categories=["units"])
    task = next(t for t in bench.tasks("dev", 50) if t.meta["places"] == 2)
    env = bench.env(task)
    env.reset()
    assert env.step(str(float(task.gold) + 0.004)).score == 1.0


def test_basic_kb_hops_gold_path_and_partial_credit():
    bench = BasicBenchmark(categories=["kb-hops"])
    for task in bench.tasks("dev", 30):
        env = bench.env(task)
        obs = env.reset()
        assert task.gold[0] in obs.actions
        for action in task.gold[:-1]:
            obs = env.step(action)
            assert not obs.done and action in obs.actions  # the path is always on the menu
        assert task.gold[-1] in obs.actions
        won = env.step(task.gold[-1])
        assert won.done and won.score == 1.0 and won.info["won"], task.id
        # every gold fact found, then a wrong answer: half credit
        env = bench.env(task)
        env.reset()
        for action in task.gold[:-1]:
            obs = env.step(action)
        assert obs.score == pytest.approx(0.5)
        wrong = next(a for a in obs.actions if a.startswith("answer ") and a != task.gold[-1])
        lost = env.step(wrong)
        assert lost.done and lost.score == pytest.approx(0.5) and not lost.info["won"]
    env = bench.env(bench.tasks("dev", 1)[0])
    env.reset()
    assert "Unknown action" in env.step("dance").text and env.step("lookup nobody owner").score == 0.0


# -- the custom benchmark example ---------------------------------------------------------------
def test_custom_benchmark_example_loads_and_scores(monkeypatch):
    from evolver import plugins

    monkeypatch.setenv("EVOLVER_PLUGINS", "")  # no installed entry-point plugins
    plugins.reset()
    try:
        plugins.load_local(ROOT / "examples" / "custom_benchmark.py")
        bench = plugins.make("benchmark", "reverse")
        tasks = bench.tasks("dev", 5)
        assert len({t.id for t in tasks}) == 5 and not {t.id for t in tasks} & {t.id for t in bench.tasks("test", 5)}
        env = bench.env(tasks[0])
        env.reset()
        assert env.step(tasks[0].gold).score == 1.0
        env = bench.env(tasks[0])
        env.reset()
        assert env.step("wrong").score == 0.0
        assert len(plugins.make("benchmark", "reverse", tasks_per_split=3).tasks("dev")) == 3
        with pytest.raises(EvolverError, match="unknown option 'tasks_per_splt'.*did you mean 'tasks_per_split'"):
            plugins.make("benchmark", "reverse", tasks_per_splt=3)
    finally:
        plugins.reset()
