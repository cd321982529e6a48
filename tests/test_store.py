"""The store: schema migrations, episode round-trips, the evaluation cache, locking and crash safety."""
from __future__ import annotations

import dataclasses
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evolver import store_schema
from evolver.errors import EvolverError, StoreLockedError
from evolver.store import Store, StoreLookupError
from evolver.trace_format import format_episode
from evolver.types import Episode, Evaluation, Step, Task

REPO = Path(__file__).resolve().parents[1]


def make_episode(i: int = 0, *, run_id: str = "r1", program: str = "p1", n_steps: int = 3, purpose: str = "eval",
                 split: str = "dev", score: float = 0.5, seed: int | None = None, prompt_len: int = 40) -> Episode:
    task = Task(id=f"t{i}", benchmark="twx", split=split, category=f"cat{i % 2}", seed=100 + i,
                prompt=f"Cook a meal #{i}", gold={"path": ["open fridge", f"take {i}"], "n": i},
                meta={"level": 2, "tags": ["a", "b"]})
    steps = [Step(index=j, prompt='[{"role": "user", "content": "' + "x" * prompt_len + f' step {j}"}}]',
                  output=f"> go {j} ünïcødé", action=f"go {j}", observation=f"You are in room {j}.\nExits: n, s",
                  reward=j / 10, prompt_tokens=100 + j, completion_tokens=5 + j,
                  tool_calls=[{"tool": "recall", "args": {"q": f"q{j}"}}] if j % 2 else [],
                  latency_s=0.25 * j, error="parse error" if j == 1 else None) for j in range(n_steps)]
    return Episode(task=task, program_id=program, program_hash=f"h-{program}", model="smollm2",
                   seed=i if seed is None else seed, steps=steps, score=score, won=score >= 1.0,
                   rewards={"valid": 0.75, "progress": score}, prediction=f"go {n_steps - 1}",
                   error="timeout" if i == 3 else None, wall_s=1.5 + i, model_s=1.0 + i, run_id=run_id,
                   purpose=purpose)


def as_stored(e: Episode) -> dict:
    """What a faithful round-trip gives back: the same fields, token totals filled from the steps."""
    d = dataclasses.asdict(e)
    d["prompt_tokens"] = sum(s.prompt_tokens for s in e.steps)
    d["completion_tokens"] = sum(s.completion_tokens for s in e.steps)
    return d


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "deep" / "folder" / "evolver.duckdb") as s:
        yield s


def count(store: Store, table: str) -> int:
    return store.query(f"SELECT count(*) FROM {table}")[1][0][0]


# -- migrations ----------------------------------------------------------------------------------

def test_migrations_recorded_and_idempotent(tmp_path):
    path = tmp_path / "a" / "s.duckdb"
    with Store(path) as s:
        first = s.query("SELECT id, name, applied_at FROM migrations")[1]
        tables = {r[0] for r in s.query("SELECT table_name FROM information_schema.tables")[1]}
    assert [(r[0], r[1]) for r in first] == [(store_schema.migration_id(fn), fn.__name__)
                                             for fn in store_schema.MIGRATIONS]
    assert first[0][:2] == (1, "m001_initial")
    assert {"runs", "programs", "episodes", "steps", "proposals", "evaluations", "frontier_events",
            "iterations", "train_steps", "migrations"} <= tables
    with Store(path) as s:
        assert s.query("SELECT id, name, applied_at FROM migrations")[1] == first


def test_old_store_gets_new_migration(tmp_path, monkeypatch):
    path = tmp_path / "s.duckdb"
    with Store(path) as s:
        s.create_run("old", "twx", {"k": 1})
    calls = []

    def m099_dummy(con):  # numbered past every real migration
        calls.append(1)
        con.execute("ALTER TABLE runs ADD COLUMN note VARCHAR DEFAULT 'migrated'")

    released = list(store_schema.MIGRATIONS)
    monkeypatch.setattr(store_schema, "MIGRATIONS", released + [m099_dummy])
    with Store(path) as s:
        assert [r[:2] for r in s.query("SELECT id, name FROM migrations ORDER BY id")[1]][-1] == (99, "m099_dummy")
        assert s.get_run("old")["note"] == "migrated"
    with Store(path) as s:
        pass
    assert calls == [1]
    # A store written by a newer evolver (it knows migration 99, we do not) is refused clearly.
    monkeypatch.setattr(store_schema, "MIGRATIONS", released)
    with pytest.raises(EvolverError, match="newer"):
        Store(path)


def test_read_only_refuses_to_migrate_and_missing_file(tmp_path, monkeypatch):
    path = tmp_path / "s.duckdb"
    Store(path).close()
    later = lambda con: None  # noqa: E731
    later.__name__ = "m099_later"
    monkeypatch.setattr(store_schema, "MIGRATIONS", list(store_schema.MIGRATIONS) + [later])
    with pytest.raises(EvolverError, match="open it once for writing"):
        Store(path, read_only=True)
    with pytest.raises(EvolverError, match="no store"):
        Store(tmp_path / "nothing.duckdb", read_only=True)


TOY_PLUGIN = """
from evolver import hookimpl

def m001_notes(con):  # no IF NOT EXISTS: a second run would fail
    con.execute("CREATE TABLE toy_notes (note VARCHAR)")
    con.execute("INSERT INTO toy_notes VALUES ('made by m001')")

def m002_counted(con):
    con.execute("ALTER TABLE toy_notes ADD COLUMN n INTEGER DEFAULT 7")

@hookimpl
def register_migrations(register):
    register("toy", [m002_counted, m001_notes])  # applied by number, not list order
"""


def test_a_plugins_migrations_apply_once_recorded_under_its_key(tmp_path):
    from evolver import plugins

    module = tmp_path / "toy_plugin.py"
    module.write_text(TOY_PLUGIN)
    plugins.load_local(module)
    path = tmp_path / "s.duckdb"
    with Store(path) as s:
        recorded = s.query("SELECT plugin, id, name, applied_at FROM plugin_migrations ORDER BY id")[1]
        assert [r[:3] for r in recorded] == [("toy", 1, "m001_notes"), ("toy", 2, "m002_counted")]
        # The plugin's numbers are its own: the core's list is untouched.
        assert [r[0] for r in s.query("SELECT id FROM migrations ORDER BY id")[1]] == [
            store_schema.migration_id(fn) for fn in store_schema.MIGRATIONS]
        assert s.execute("INSERT INTO toy_notes VALUES ('written', 1) RETURNING note") == [("written",)]
    with Store(path) as s:  # reopened with the plugin loaded: nothing runs again
        assert s.query("SELECT plugin, id, name, applied_at FROM plugin_migrations ORDER BY id")[1] == recorded
        assert s.query("SELECT note, n FROM toy_notes ORDER BY note")[1] == [("made by m001", 7), ("written", 1)]
    plugins.reset()
    with Store(path) as s:  # without the plugin: its tables stay, nothing is refused
        assert count(s, "toy_notes") == 2
    # A plugin older than the store (it knows fewer migrations than are recorded) is refused clearly.
    module.write_text(TOY_PLUGIN.replace("[m002_counted, m001_notes]", "[m001_notes]"))
    plugins.load_local(module)
    with pytest.raises(EvolverError, match="migrations \\[2\\] of the plugin 'toy'.*newer"):
        Store(path)


# -- episodes ------------------------------------------------------------------------------------

def test_episode_round_trip_every_field(store):
    eps = [make_episode(i) for i in range(4)]
    assert store.add_episodes(eps) == 4
    assert all(len(e.id) == 32 for e in eps) and len({e.id for e in eps}) == 4
    for e in eps:
        back = store.episode(e.id)
        assert as_stored(back) == as_stored(e)
        assert back.cached is False and back.task == e.task and back.steps == e.steps
    listed = store.episodes(run_id="r1", with_steps=True)
    assert [as_stored(e) for e in listed] == [as_stored(e) for e in eps]
    without = store.episodes(run_id="r1")
    assert all(e.steps == [] for e in without)
    assert [e.prompt_tokens for e in without] == [e.prompt_tokens for e in listed] == [303] * 4
    row = store.query("SELECT n_steps, benchmark, task_id, split, category, cache_key, gold->>'$.n' "
                      "FROM episodes WHERE episode_id = ?", [eps[2].id])[1][0]
    assert row == (3, "twx", "t2", "dev", "cat0", eps[2].cache_key, "2")


def test_episode_without_steps_keeps_given_totals(store):
    e = make_episode(0, n_steps=0)
    e.prompt_tokens, e.completion_tokens = 77, 7
    store.add_episodes([e])
    back = store.episode(e.id)
    assert (back.prompt_tokens, back.completion_tokens, back.steps) == (77, 7, [])


def test_re_add_is_idempotent(store):
    eps = [make_episode(i) for i in range(3)]
    assert store.add_episodes(eps) == 3
    assert store.add_episodes(eps) == 0  # same objects, ids now set
    fresh = [make_episode(i) for i in range(3)]  # a resumed run replaying the same work
    assert store.add_episodes(fresh) == 0
    assert [e.id for e in fresh] == [e.id for e in eps]  # pointed at the stored rows
    assert count(store, "episodes") == 3 and count(store, "steps") == 9
    # Another purpose, another run, or another seed is another episode.
    assert store.add_episodes([make_episode(0, purpose="train"), make_episode(0, run_id="r2"),
                               make_episode(0, seed=99)]) == 3
    # Within one call the first of two duplicates wins.
    assert store.add_episodes([make_episode(7), make_episode(7)]) == 1
    assert count(store, "episodes") == 7 and count(store, "steps") == 21


def test_cached_lookup(store):
    eps = [make_episode(i) for i in range(5)]
    store.add_episodes(eps)
    keys = [e.cache_key for e in eps] + ["no-such-key"]
    found = store.cached(keys)
    assert set(found) == {e.cache_key for e in eps}
    for e in eps:
        c = found[e.cache_key]
        assert c.cached is True and c.steps == [] and c.id == e.id and c.cache_key == e.cache_key
        assert (c.score, c.task, c.prompt_tokens, c.error) == (e.score, e.task, e.prompt_tokens or 303, e.error)
    # Any run's episode serves; one without an error beats a failed one.
    bad = make_episode(10, run_id="r0")
    bad.error = "backend down"
    store.add_episodes([bad])
    good = make_episode(10, run_id="r9")
    store.add_episodes([good])
    assert store.cached([good.cache_key])[good.cache_key].id == good.id
    assert store.cached([good.cache_key], purpose="train") == {}
    assert store.cached([]) == {}


def test_a_run_finds_the_episodes_it_took_from_the_cache_among_its_own(store):
    theirs = [make_episode(i, run_id="r1", split="train", purpose="train") for i in range(3)]
    store.add_episodes(theirs)
    found = store.cached([e.cache_key for e in theirs[:2]])
    store.add_uses("r2", list(found.values()))
    store.add_uses("r2", list(found.values()))  # recorded once
    store.add_uses("r1", list(found.values()))  # r1's own: nothing to record
    mine = store.episodes(run_id="r2", split="train", with_steps=True)
    assert sorted(e.id for e in mine) == sorted(e.id for e in theirs[:2]) and all(len(e.steps) == 3 for e in mine)
    assert len(store.episodes(run_id="r1")) == 3 and count(store, "episode_uses") == 2
    # still not played by r2: what it stored itself is what counts as played
    assert store.query("SELECT count(*) FROM episodes WHERE run_id = 'r2'")[1] == [(0,)]


def test_cached_many_keys_is_one_fast_query(store):
    eps = [make_episode(i, n_steps=1) for i in range(3000)]
    store.add_episodes(eps)
    t = time.perf_counter()
    found = store.cached([e.cache_key for e in eps] + [f"missing{i}" for i in range(3000)])
    assert len(found) == 3000
    assert time.perf_counter() - t < 2.0


def test_filters(store):
    store.add_episodes([make_episode(i, program="pa", score=i / 10) for i in range(5)])
    store.add_episodes([make_episode(i, program="pb", split="test", purpose="train", score=1.0) for i in range(3)])
    store.add_episodes([make_episode(i, run_id="r2") for i in range(2)])
    assert len(store.episodes()) == 10
    assert len(store.episodes(run_id="r1")) == 8
    assert [e.score for e in store.episodes(program_id="pa")] == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert len(store.episodes(split="test")) == 3 and len(store.episodes(purpose="train")) == 3
    assert [e.score for e in store.episodes(program_id="pa", max_score=0.2)] == [0.0, 0.1, 0.2]
    assert [e.score for e in store.episodes(run_id="r1", min_score=0.4, max_score=0.99)] == [0.4]
    assert len(store.episodes(limit=4)) == 4
    some = store.episodes(program_id="pa")[:2]
    got = store.episodes(ids=[e.id for e in some], with_steps=True)
    assert [e.id for e in got] == [e.id for e in some] and all(len(e.steps) == 3 for e in got)


def test_prefix_lookup(store):
    eps = [make_episode(i) for i in range(3)]
    eps[0].id, eps[1].id, eps[2].id = "abc111", "abc222", "ffff00"
    store.add_episodes(eps)
    assert store.episode("abc1").id == "abc111"
    assert store.episode("f").id == "ffff00"
    assert len(store.episode("abc222").steps) == 3
    with pytest.raises(StoreLookupError, match="ambiguous.*abc111.*abc222"):
        store.episode("abc")
    with pytest.raises(StoreLookupError, match="no episode"):
        store.episode("zzz")


def test_unclean_values_fall_back_and_still_store(store):
    e = make_episode(0)
    e.steps[0].prompt = "broken \ud800 surrogate"
    e.steps[1].output = 42  # not a str
    e.steps[2].prompt_tokens = None
    e.rewards = {"nan": float("nan")}
    e.prediction = ["a", "list"]
    for s in e.steps:  # chat messages passed as a list: equal-length lists across the whole column
        s.observation = [{"role": "user", "content": "hi"}]
    assert store.add_episodes([e]) == 1
    back = store.episode(e.id)
    assert back.steps[0].prompt == "broken ? surrogate" and back.steps[1].output == "42"
    assert back.prediction == '["a", "list"]'
    assert back.steps[2].observation == '[{"role": "user", "content": "hi"}]'
    assert back.steps[2].prompt_tokens == 0 and back.rewards == {"nan": None}


def test_bulk_speed_sanity(store):
    eps = [make_episode(i, n_steps=20, prompt_len=1200) for i in range(1000)]  # 20k steps
    t = time.perf_counter()
    store.add_episodes(eps)
    assert time.perf_counter() - t < 3.0
    assert count(store, "steps") == 20_000


def test_format_episode(store):
    e = make_episode(3)
    store.add_episodes([e])
    text = store.format_episode(store.episode(e.id))
    for part in ("twx/t3", "score   0.500", "--- step 2", "x step 2", "> go 1", "'go 1'", "room 2",
                 '"tool": "recall"', "parse error", "ERROR   timeout", "prediction: 'go 2'"):
        assert part in text, part
    assert format_episode(e) == text  # the in-memory episode renders the same


# -- runs, programs, proposals, evaluations, frontier, iterations --------------------------------

def test_runs(store):
    assert store.latest_run() is None and store.get_run("x") is None
    store.create_run("r1", "twx", {"model": "smollm2", "loop": {"iterations": 3}})
    store.create_run("r2", "rg", {})
    with pytest.raises(EvolverError, match="already exists"):
        store.create_run("r1", "twx", {})
    store.update_run("r1", status="finished", summary={"best": 0.7})
    store.update_run("r1", summary={"best": 0.8})
    r1 = store.get_run("r1")
    assert (r1["status"], r1["summary"], r1["config"]["loop"]) == ("finished", {"best": 0.8}, {"iterations": 3})
    assert r1["updated_at"] >= r1["created_at"]
    assert store.latest_run()["run_id"] == "r2"
    assert store.latest_run(status="finished")["run_id"] == "r1"
    store.create_run("train-1", "twx", {})
    store.update_run("train-1", status="failed")
    assert store.latest_run(status=("running", "failed"), prefix="train-")["run_id"] == "train-1"
    assert store.latest_run(status="running", prefix="train-") is None
    with pytest.raises(StoreLookupError):
        store.update_run("nope", status="x")
    assert store.query("SELECT config->>'$.model' FROM runs WHERE run_id = 'r1'")[1] == [("smollm2",)]


def test_programs_and_proposals(store):
    store.add_program("seed", "r1", "c0", "h0", "", "seed", "", {"id": "seed"})
    store.add_program("seed", "r1", "c9", "h9", "", "seed", "", {})  # resume: first row kept
    store.add_program("p1", "r1", "", "h1", "seed", "edit", "p1", {"id": "p1"})
    store.update_program_commit("p1", "c1", {"id": "p1", "score": 0.5})
    assert store.get_program("seed")["commit"] == "c0"
    p1 = store.get_program("p1")
    assert (p1["commit"], p1["manifest"], p1["parent_id"]) == ("c1", {"id": "p1", "score": 0.5}, "seed")
    assert [p["program_id"] for p in store.programs("r1")] == ["seed", "p1"]
    assert store.get_program("nope") is None
    with pytest.raises(StoreLookupError):
        store.update_program_commit("nope", "c", {})

    store.add_proposal("p1", "r1", 0, "reflect", "edit", "seed", "p1", "be terse", {"files": ["prompt.md"]})
    store.add_proposal("p2", "r1", 0, "reflect", "create", "seed", "p2", "add skill", {})
    store.add_proposal("p3", "r2", 0, "x", "edit", "seed", "p3", "", {})
    store.update_proposal("p1", "admitted", "dominates", {"score": 0.6})
    store.update_proposal("p2", "rejected", "lint failed")
    props = store.proposals("r1")
    assert [(p["proposal_id"], p["status"], p["reason"], p["scores"]) for p in props] == [
        ("p1", "admitted", "dominates", {"score": 0.6}), ("p2", "rejected", "lint failed", None)]
    assert props[0]["detail"] == {"files": ["prompt.md"]} and props[0]["hypothesis"] == "be terse"
    assert len(store.proposals()) == 3


def test_evaluations_frontier_iterations_train_steps(store):
    ev = Evaluation(program_id="p1", split="dev", score=0.5, success=0.25, n=8, context_tokens=300.0, cost=420.0,
                    per_category={"twc": 0.6}, errors=1)
    store.add_evaluation("r1", 2, ev)
    store.add_evaluation("r1", 2, dataclasses.replace(ev, split="test", score=0.4))
    rows = store.evaluations("r1", program_id="p1", split="dev")
    assert len(rows) == 1 and {k: rows[0][k] for k in dataclasses.asdict(ev)} == dataclasses.asdict(ev)
    assert rows[0]["iteration"] == 2 and len(store.evaluations("r1")) == 2

    store.add_frontier_event("r1", -1, "seed", "seed", {"score": 0.3})
    store.add_frontier_event("r1", 0, "p1", "admit", ev.metrics(), "dominates seed")
    with pytest.raises(ValueError):
        store.add_frontier_event("r1", 0, "p1", "promote", {})
    fe = store.frontier_events("r1")
    assert [(f["event"], f["program_id"]) for f in fe] == [("seed", "seed"), ("admit", "p1")]
    assert fe[1]["metrics"]["cost"] == 420.0 and fe[1]["reason"] == "dominates seed"

    assert store.last_finished_iteration("r1") == -1
    store.start_iteration("r1", 0, "seed")
    store.finish_iteration("r1", 0, ["seed", "p1"], {"admitted": ["p1"]})
    store.start_iteration("r1", 1, "p1")
    assert store.last_finished_iteration("r1") == 0
    its = store.iterations("r1")
    assert [(i["iteration"], i["status"], i["parent_id"]) for i in its] == [
        (0, "finished", "seed"), (1, "started", "p1")]
    assert its[0]["frontier"] == ["seed", "p1"] and its[0]["finished_at"] is not None
    store.start_iteration("r1", 1, "p1")  # restarted after a crash: still one row
    assert len(store.iterations("r1")) == 2

    store.add_train_steps("r1", [{"step": 1, "loss": 0.5, "reward": math.inf}, {"step": 2, "loss": 0.4}])
    cols, rows = store.query("SELECT step, metrics->>'$.loss', metrics->>'$.reward' FROM train_steps ORDER BY step")
    assert rows == [(1, "0.5", None), (2, "0.4", None)]


# -- processes: locking and SIGKILL ---------------------------------------------------------------

def _child(code: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen, pred=lambda text: True, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and pred(text := path.read_text()):
            return text
        if proc.poll() is not None:
            raise AssertionError(f"child exited early: {proc.communicate()}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"child did not signal within {timeout}s")


def test_second_process_gets_store_locked_error(tmp_path):
    db, ready = tmp_path / "s.duckdb", tmp_path / "ready"
    proc = _child(f"""
        import time
        from evolver.store import Store
        s = Store({str(db)!r})
        open({str(ready)!r}, "w").write("ok")
        time.sleep(120)
    """)
    try:
        _wait_for(ready, proc)
        for read_only in (False, True):
            with pytest.raises(StoreLockedError) as err:
                Store(db, read_only=read_only)
            msg = str(err.value)
            assert str(db) in msg and f"PID {proc.pid}" in msg and "--store" in msg and "wait" in msg.lower()
    finally:
        proc.kill()
        proc.wait(timeout=30)
    with Store(db) as s:  # released with the process
        assert count(s, "runs") == 0


def test_sigkill_loses_nothing_committed(tmp_path):
    db, progress = tmp_path / "s.duckdb", tmp_path / "progress"
    n_batches, per_batch, n_steps = 4, 50, 10
    proc = _child(f"""
        import sys, time
        sys.path.insert(0, {str(REPO / "tests")!r})
        from test_store import make_episode
        from evolver.store import Store
        s = Store({str(db)!r})
        s.create_run("r1", "twx", {{}})
        for b in range({n_batches}):
            s.add_episodes([make_episode(b * 1000 + i, n_steps={n_steps}) for i in range({per_batch})])
            open({str(progress)!r}, "w").write(str(b + 1))
        # Killed in the middle of a transaction that never commits: none of it may survive.
        s._con.execute("BEGIN TRANSACTION")
        s._con.execute("INSERT INTO steps (episode_id, idx) SELECT 'uncommitted', range FROM range(50000)")
        s._con.execute("UPDATE runs SET status = 'should-not-stick'")
        open({str(progress)!r}, "w").write("in-transaction")
        time.sleep(120)
    """)
    try:
        _wait_for(progress, proc, lambda text: text == "in-transaction")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    with Store(db) as s:
        assert count(s, "episodes") == n_batches * per_batch
        assert count(s, "steps") == n_batches * per_batch * n_steps
        assert s.get_run("r1")["status"] == "running"
        ep = s.episode(s.episodes(limit=1)[0].id)
        assert len(ep.steps) == n_steps
        assert s.add_episodes([make_episode(999_999)]) == 1  # writable again
