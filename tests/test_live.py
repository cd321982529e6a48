"""A run's live state (evolver/live.py): written when the status changes, at most once a second with the
last change inside that second written when it ends, whole files only, and marked closed with the run."""
import json
import time
from types import SimpleNamespace

from evolver import ProgramRepo, Run, Store
from evolver.config import Config
from evolver import live


def fake_run(tmp_path):
    run = SimpleNamespace(id="20250101-000000-abcd", workspace=tmp_path, status="", iteration=0, started=time.time(),
                          config=SimpleNamespace(loop=SimpleNamespace(iterations=3)), tokens={"executor": 5},
                          frontier=SimpleNamespace(members=[SimpleNamespace(program_id="seed",
                                                                            metrics={"score": 0.25})]))
    run.elapsed = lambda: time.time() - run.started
    return run


def test_the_live_state_is_throttled_and_the_last_change_still_lands(tmp_path, monkeypatch):
    monkeypatch.setattr(live, "MIN_INTERVAL_S", 0.3)
    run = fake_run(tmp_path)
    pub = live.LivePublisher(run)
    for i in range(50):
        run.status = f"evaluating {i}/50"
        pub.publish()
    doc = live.read_live(tmp_path, run.id)
    assert doc["status"] == "evaluating 0/50" and doc["state"] == "running"  # the first, at once
    time.sleep(0.6)
    doc = live.read_live(tmp_path, run.id)
    assert doc["status"] == "evaluating 49/50"  # the last, when the interval ended
    assert doc["iteration"] == 0 and doc["iterations"] == 3 and doc["tokens"] == {"executor": 5}
    assert doc["frontier"] == [{"program_id": "seed", "metrics": {"score": 0.25}}]
    run.status = "done"
    pub.publish(state="closed", force=True)
    time.sleep(0.4)  # no pending write may overwrite the closed state
    doc = live.read_live(tmp_path, run.id)
    assert doc["state"] == "closed" and doc["status"] == "done"
    assert [p.name for p in (tmp_path / "live").iterdir()] == [f"{run.id}.json"]  # no temporary file left


def test_a_run_publishes_its_status_and_closes_it(tmp_path):
    cfg = Config(benchmark="basic", store=str(tmp_path / "store"))
    store = Store(tmp_path / "store" / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(tmp_path / "store"))
    try:
        assert live.read_live(cfg.store, run.id) is None  # nothing until the first status
        run.status = "seed on dev"
        doc = live.read_live(cfg.store, run.id)
        assert doc["status"] == "seed on dev" and doc["state"] == "running" and doc["pid"] > 0
    finally:
        run.close()
        store.close()
    assert json.loads((tmp_path / "store" / "live" / f"{run.id}.json").read_text())["state"] == "closed"


def test_an_unwritable_workspace_does_not_stop_the_run(tmp_path):
    run = fake_run(tmp_path / "file")
    (tmp_path / "file").write_text("not a folder")
    live.LivePublisher(run).publish()  # no error
    assert live.read_live(tmp_path / "file", run.id) is None
