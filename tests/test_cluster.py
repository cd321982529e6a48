"""Episodes on a Ray cluster (``[cluster] engine = "ray"``): the same results as in-process, each episode
stored once when a worker dies mid-share, and workers that cannot start reported. A real local cluster
(``ray.init(num_cpus=2)``) with the toy benchmark's scripted executor."""
from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from evolver import plugins
from evolver.config import Config, RoleConfig
from evolver.errors import EvolverError
from evolver.playing import play
from evolver.seeding import ensure_seed
from evolver.programs import ProgramRepo
from evolver.run import Run
from evolver.store import Store

ray = pytest.importorskip("ray")
TOY = Path(__file__).with_name("toybench.py")
FLAKY = Path(__file__).with_name("flakybackend.py")


@pytest.fixture(scope="module")
def local_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def make_run(tmp_path, cluster: bool, delay: float = 0.0, workers: int = 2, executor: str = "toyrule",
             **options) -> Run:
    plugins.load_local(TOY)
    roles = {r: RoleConfig(backend="toyrule", options={"delay": delay}) for r in ("proposer", "builder", "judge")}
    roles["executor"] = RoleConfig(backend=executor, options={"delay": delay, **options})
    cfg = Config(benchmark="upper", benchmark_options={}, store=str(tmp_path / "store"), roles=roles, proposers=[],
                 cluster={"engine": "ray", "workers": workers, "cpus_per_worker": 0.5} if cluster else {})
    run = Run(cfg, Store(Path(cfg.store) / "evolver.duckdb"), ProgramRepo(Path(cfg.store)))
    run.record()
    return run


def episodes_of(run, seeds=range(3), temperature=None, **kw):
    seed_program = ensure_seed(run)
    ctx = run.context(seed_program)
    tasks = run.benchmark.tasks("dev")
    jobs = [(ctx, tasks, s) for s in seeds]
    return [e for lst in play(run, jobs, temperature=temperature, store=run.store, **kw) for e in lst]


def view(episodes):
    return [(e.task.id, e.seed, e.score, e.won, e.error, [(s.prompt, s.output, s.action) for s in e.steps])
            for e in episodes]


def test_the_cluster_plays_what_the_process_plays_and_the_driver_stores_it(tmp_path, local_cluster):
    here = make_run(tmp_path / "here", cluster=False)
    there = make_run(tmp_path / "there", cluster=True)
    try:
        assert here.cluster is None and there.cluster.name == "ray" and len(there.cluster.workers) == 2
        for temperature in (None, 0.7):  # greedy, and sampled with each request seeded from its episode
            mine, theirs = episodes_of(here, temperature=temperature), episodes_of(there, temperature=temperature)
            assert view(theirs) == view(mine) and len(theirs) == 12
        stored = there.store.episodes(run_id=there.id)
        assert len(stored) == 24 and len({e.id for e in stored}) == 24
        assert there.tokens["executor"] == sum(e.prompt_tokens + e.completion_tokens for e in stored) > 0
        cluster = there.cluster
        assert sorted(p.name for p in cluster.folder.iterdir()) == ["worker-0", "worker-1"]
        assert all((p / "programs").is_dir() for p in cluster.folder.iterdir())
        there.close()
        assert not cluster.folder.exists()  # the workers' copies of the programs are gone
    finally:
        here.close(), there.close()
        here.store.close(), there.store.close()


def test_a_worker_killed_mid_share_loses_nothing_and_stores_nothing_twice(tmp_path, local_cluster):
    run = make_run(tmp_path, cluster=True, delay=0.2)
    try:
        victim = run.cluster.workers[0]
        pid = ray.get(victim.pid.remote())
        killed = threading.Event()

        def kill_once(episode):
            if not killed.is_set():
                killed.set()
                os.kill(pid, signal.SIGKILL)
        eps = episodes_of(run, seeds=range(4), on_episode=kill_once, max_live=1)
        assert killed.is_set() and len(eps) == 16 and not any(e.error for e in eps)
        assert len(run.cluster.workers) == 1 and len(run.cluster.failures) == 1
        stored = run.store.episodes(run_id=run.id)
        keys = [(e.task.id, e.seed) for e in stored]
        assert len(keys) == 16 and len(set(keys)) == 16
        cluster = run.cluster
        run.close()
        assert not cluster.folder.exists()  # the killed worker's folder too
    finally:
        run.close()
        run.store.close()


def test_a_worker_that_cannot_start_is_reported_and_the_others_play(tmp_path, local_cluster, capfd):
    plugins.load_local(FLAKY)
    marker = tmp_path / "first-start"
    run = make_run(tmp_path, cluster=True, executor="flaky", marker=str(marker))
    try:
        assert len(run.cluster.workers) == 1 and "no GPU on this worker" in run.cluster.failures[0]
        assert "a ray worker could not start: RuntimeError: no GPU on this worker" in capfd.readouterr().err
        assert len(episodes_of(run, seeds=[0])) == 4
        cluster = run.cluster
        run.close()
        assert not cluster.folder.exists()  # the one that could not start left nothing either
    finally:
        run.close()
        run.store.close()


def test_no_worker_that_can_start_stops_with_the_reason(tmp_path, local_cluster):
    run = make_run(tmp_path, cluster=True, executor="no-such-engine", workers=1)
    try:
        with pytest.raises(EvolverError, match="no ray worker could start"):
            run.cluster
    finally:
        run.close()
        run.store.close()


def test_evolver_run_on_the_cluster_climbs_as_it_does_in_process(tmp_path, local_cluster, monkeypatch):
    from click.testing import CliRunner

    from evolver.cli import cli

    monkeypatch.chdir(tmp_path)
    roles = [f"--set=roles.{r}.backend=toyrule" for r in ("executor", "proposer", "builder", "judge")]
    args = ["--plugin", str(TOY), "--store", str(tmp_path / "store"), "--set=benchmark=upper",
            "--set=benchmark_options={}", "--set=proposers=[\"evoskill\"]", *roles]
    r = CliRunner().invoke(cli, args + ["run", "--cluster", "ray", "--iterations", "1",
                                        "--set=loop.candidates_per_iteration=1", "--set=cluster.workers=2"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "Best vs seed on test: +1.000, 95% bootstrap interval [1.000, 1.000] on 4 tasks (paired)." in r.output
    store = Store(tmp_path / "store" / "evolver.duckdb")
    try:
        run = store.latest_run()
        assert run["config"]["cluster"]["engine"] == "ray" and run["status"] == "finished"
        _, rows = store.query("SELECT program_id, task_id, seed, purpose, count(*) AS n FROM episodes "
                           "GROUP BY ALL HAVING count(*) > 1")
        assert rows == []  # each episode stored once
    finally:
        store.close()


def test_workers_play_the_weights_a_trainer_shares_and_never_stale_ones(tmp_path, local_cluster):
    pytest.importorskip("evolver_transformers")
    import torch

    from evolver.remote import describe, share_weights
    from tinymodel import build_tiny_model

    tiny = str(build_tiny_model(tmp_path / "tiny"))

    def tiny_run(folder, cluster):
        plugins.load_local(TOY)
        roles = {r: RoleConfig(backend="transformers", model=tiny, options={"dtype": "float32"}, max_tokens=8)
                 for r in ("executor", "proposer", "builder", "judge")}
        cfg = Config(benchmark="upper", benchmark_options={}, store=str(folder), roles=roles, proposers=[],
                     loop={"monitor": "off"}, cluster={"engine": "ray", "workers": 1, "cpus_per_worker": 0.5}
                     if cluster else {})
        run = Run(cfg, Store(Path(cfg.store) / "evolver.duckdb"), ProgramRepo(Path(cfg.store)))
        run.record()
        return run

    def outputs(run):
        return [s.output for e in episodes_of(run, seeds=[0]) for s in e.steps]
    here, there = tiny_run(tmp_path / "here", False), tiny_run(tmp_path / "there", True)
    try:
        before = outputs(there)
        assert before == outputs(here)
        torch.manual_seed(1)
        backend = there.backend("executor")
        state = {k: v + 0.5 * torch.randn_like(v) for k, v in backend.hf_model.state_dict().items()}
        backend.load_weights(state, model_id="tiny+step1")
        here.backend("executor").load_weights(state, model_id="tiny+step1")
        assert describe(there.executor_for(ensure_seed(there))) is None  # changed, not shared: plays here
        assert share_weights(there, backend, lambda: state, "tiny+step1")
        spec = describe(there.executor_for(ensure_seed(there)))
        assert spec["version"] == "tiny+step1"
        after = outputs(there)
        assert after != before and after == outputs(here)
    finally:
        here.close(), there.close()
        here.store.close(), there.store.close()
