"""The twx benchmark: TextWorldExpress through the shared JVM pool (most tests need Java 17)."""
from __future__ import annotations

import dataclasses
import random
import shutil

import pytest

from evolver import BenchmarkError, UnknownNameError
from evolver_twx import benchmark as twx_mod

needs_java = pytest.mark.skipif(shutil.which("java") is None, reason="Java not installed")


# -- twx ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def twx():
    bench = twx_mod.TwxBenchmark(suite="twx-easy")
    yield bench
    bench.close()


def _play(env, rng, steps):
    """A random valid-action trajectory: (text, actions, score, done) per observation."""
    obs = env.reset()
    out = [(obs.text, obs.actions, obs.score, obs.done)]
    for _ in range(steps):
        if obs.done:
            break
        obs = env.step(rng.choice(obs.actions))
        out.append((obs.text, obs.actions, obs.score, obs.done))
    return out


@needs_java
def test_twx_splits_disjoint_and_ids_deterministic(twx):
    by_split = {s: twx.tasks(s, 3) for s in ("train", "dev", "test")}
    assert len(by_split["dev"]) == 3 * len(twx.categories) == 18
    ids = [t.id for ts in by_split.values() for t in ts]
    assert len(ids) == len(set(ids))
    seeds = {s: {(t.category, t.seed) for t in ts} for s, ts in by_split.items()}
    assert not (seeds["train"] & seeds["dev"]) and not (seeds["dev"] & seeds["test"])
    assert not (seeds["train"] & seeds["test"])
    assert by_split["dev"][0].id == "twx-easy/cookingworld/dev/0" and by_split["dev"][0].seed == 10000
    assert [t.id for t in twx.tasks("dev", 3)] == [t.id for t in by_split["dev"]]
    assert [t.id for t in twx.tasks("dev", 5)][:3] == [t.id for t in by_split["dev"]][:3]  # prefix-stable
    other = twx_mod.TwxBenchmark(games=["simonsays", "twc"], jvm_pool=1)
    try:
        again = {t.id: t for t in other.tasks("dev", 3)}
        for t in by_split["dev"]:
            if t.category in again:
                assert dataclasses.asdict(again[t.id]) == dataclasses.asdict(t)
    finally:
        other.close()
    t = by_split["dev"][0]
    assert t.meta["description"] in t.prompt and isinstance(t.gold, list) and t.gold


@needs_java
def test_twx_reset_step_and_bad_actions(twx):
    task = twx.tasks("dev", 1)[0]  # cookingworld
    env = twx.env(task)
    obs = env.reset()
    assert obs.text and obs.actions == sorted(obs.actions) and obs.score == 0.0 and not obs.done
    assert obs.text.strip() in task.prompt and "look" in obs.info and "inventory" in obs.info
    bad = env.step("fly to the moon")
    assert not bad.done and bad.score == 0.0 and bad.info["valid"] is False
    assert "Unknown action" in bad.text
    loose = env.step("  Take   COOKBOOK ")  # case and spacing are forgiven
    assert loose.info["valid"] and "take" in loose.text.lower() and loose.info["steps"] == 2
    env.close()


@needs_java
def test_twx_gold_path_wins_every_easy_game(twx):
    for task in twx.tasks("dev", 3):
        env = twx.env(task)
        obs = env.reset()
        for action in task.gold:
            assert 0.0 <= obs.score <= 1.0 and not obs.done, task.id
            obs = env.step(action)
        assert obs.done and obs.score == 1.0 and obs.info["won"], task.id
        env.close()


@needs_java
def test_twx_lost_game_scores_zero_and_never_raises(twx):
    task = next(t for t in twx.tasks("dev", 1) if t.category == "simonsays")
    env = twx.env(task)
    obs = env.reset()
    wrong = next(a for a in obs.actions if a != task.gold[0])
    lost = env.step(wrong)
    assert lost.done and lost.info["lost"] and not lost.info["won"]
    assert lost.info["twx_score"] < 0 and lost.score == 0.0
    after = env.step(task.gold[0])  # stepping a finished game answers, does not raise
    assert after.done and after.score == 0.0
    env.close()


@needs_java
def test_twx_interleaved_and_replayed_trajectories_equal_sequential(twx):
    # Two episodes per task, as a GRPO group plays them: twx's sorting games of one problem share
    # JVM-side objects, so concurrent same-task episodes must not disturb each other.
    episodes = [(t, t.seed + k) for k in range(2) for t in twx.tasks("dev", 2)]  # 24 episodes
    sequential = []
    for task, rs in episodes:
        env = twx.env(task)
        sequential.append(_play(env, random.Random(rs), 8))
        env.close()
    envs = [twx.env(task) for task, _ in episodes]
    rngs = [random.Random(rs) for _, rs in episodes]
    traj = []
    for env in envs:
        o = env.reset()
        traj.append([(o.text, o.actions, o.score, o.done)])
    half = len(envs) // 2  # the pool alternates JVMs, so both copies of a task share one
    assert all(envs[i].lease.jvm is envs[i + half].lease.jvm for i in range(half))
    for r in range(8):
        if r == 3:  # kill a JVM mid-episode: its envs must replay their history on a new one
            victim = envs[0].lease.jvm
            victim.proc.kill()
            victim.proc.wait()
        for i in random.Random(r).sample(range(len(envs)), len(envs)):
            last = traj[i][-1]
            if not last[3]:
                o = envs[i].step(rngs[i].choice(last[1]))
                traj[i].append((o.text, o.actions, o.score, o.done))
    assert traj == sequential
    assert victim.gen == 1 and victim.proc.poll() is None  # it was restarted once, and runs
    for env in envs:
        env.close()


@needs_java
def test_twx_step_limit_and_unknown_names():
    bench = twx_mod.TwxBenchmark(games=["twc"], max_steps=3, jvm_pool=1)
    try:
        env = bench.env(bench.tasks("train", 1)[0])
        env.reset()
        obs = [env.step("look around") for _ in range(3)]
        assert [o.done for o in obs] == [False, False, True] and obs[-1].info["truncated"]
        with pytest.raises(UnknownNameError):
            twx_mod.TwxBenchmark(games=["coin"])
        with pytest.raises(UnknownNameError):
            twx_mod.TwxBenchmark(suite="twx-medium")
        with pytest.raises(BenchmarkError):
            bench.tasks("validation")
    finally:
        bench.close()
    procs = [j for j in bench._pool.jvms]
    assert all(j.proc is None for j in procs)
    with pytest.raises(BenchmarkError, match="closed"):
        env.reset()


@needs_java
def test_twx_close_leaves_no_jvm():
    bench = twx_mod.TwxBenchmark(games=["arithmetic", "sorting"], jvm_pool=2)
    envs = [bench.env(t) for t in bench.tasks("dev", 2)]
    for env in envs:
        env.reset()
    procs = [j.proc for j in bench._pool.jvms]
    assert len(procs) == 2 and all(p is not None and p.poll() is None for p in procs)
    bench.close()
    assert all(p.poll() is not None for p in procs)


def test_twx_without_java_says_how_to_fix(monkeypatch):
    monkeypatch.setattr(twx_mod.shutil, "which", lambda name: None)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(BenchmarkError, match="Java 17 not found.*--benchmark basic"):
        twx_mod.TwxBenchmark()


def test_the_registered_twx_falls_back_to_basic_without_java(monkeypatch, capsys):
    import evolver_twx

    monkeypatch.setattr(evolver_twx.shutil, "which", lambda name: None)
    bench = evolver_twx.twx_benchmark(suite="twx-easy")
    assert bench.name == "basic" and "Java not found" in capsys.readouterr().err


def test_twx_declares_its_options_and_a_misspelt_one_fails_before_any_work(tmp_path, monkeypatch):
    import inspect

    from click.testing import CliRunner

    import evolver_twx
    from evolver import plugins
    from evolver.cli import cli

    # the registered factory declares TwxBenchmark's own options, so they are checked without importing it
    assert plugins.declared_options(plugins.get("benchmark", "twx").factory) == \
        list(inspect.signature(twx_mod.TwxBenchmark).parameters) == ["suite", "games", "max_steps", "jvm_pool"]
    assert plugins.get("benchmark", "twx").factory is evolver_twx.twx_benchmark
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["--set", "benchmark_options.max_stepz=3", "eval"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "benchmark 'twx': unknown option 'max_stepz' (benchmark_options.max_stepz); did you mean 'max_steps'?" \
        in r.output
    assert not (tmp_path / "store").exists()  # refused before the workspace was touched


def test_the_default_profile_leaves_split_sizes_to_the_benchmarks_categories():
    """Its sizes are totals: 1 / 4 / 6 tasks a game on twx's six games, and 6 / 24 / 36 on a benchmark of
    one category picked with ``--set benchmark=...`` (4 dev tasks there would admit nothing)."""
    from evolver.config import load_config, sized
    cfg = load_config(None, profile="default")
    assert cfg.benchmark == "twx"
    twx = sized(cfg.loop, 6)
    assert (twx.train_per_category, twx.dev_per_category, twx.test_per_category) == (1, 4, 6)
    other = load_config(None, ["benchmark=reverse"], profile="default").loop
    one = sized(other, 1)
    assert (one.train_per_category, one.dev_per_category, one.test_per_category) == (6, 24, 36)
