"""GRPO's rollouts on a Ray cluster's workers: each step's weights reach the workers before its rollouts,
the rollouts keep their exact token ids and log-probs, and the driver alone writes the store."""
from __future__ import annotations

import pytest
import torch

from evolver import plugins
from evolver.config import Config, RoleConfig
from evolver.programs import ProgramRepo
from evolver.run import Run
from evolver.store import Store

from test_grpo_trainer import HERE

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_grpo_rollouts_play_on_the_workers_with_each_steps_weights(tmp_path, tiny_dir, local_cluster):
    from evolver.seeding import ensure_seed
    from evolver_training.logprobs import completion_logprobs
    from evolver_grpo.trainer import GRPOTrainer

    plugins.load_local(HERE / "letterbench.py")
    roles = {r: RoleConfig(backend="transformers", model=str(tiny_dir), options={"dtype": "fp32"})
             for r in ("executor", "proposer", "builder", "judge")}
    cfg = Config(benchmark="letters", benchmark_options={"steps": 2}, store=str(tmp_path / "store"), roles=roles,
                 plugins={"grpo": {"max_new_tokens": 6, "autocast": False}},
                 cluster={"engine": "ray", "workers": 2, "cpus_per_worker": 0.5})
    run = Run(cfg, Store(tmp_path / "store" / "evolver.duckdb"), ProgramRepo(tmp_path / "store"))
    run.record()
    ensure_seed(run)
    played, versions = [], []
    cluster = run.cluster
    play = cluster.play

    def counted(units, programs, config=None, **kw):
        played.extend(units)
        versions.append({u.backend["inner"].get("version") for u in units})
        yield from play(units, programs, config, **kw)
    cluster.play = counted
    try:
        trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"], steps=3, lr=1e-2, group_size=4, tasks_per_step=2))
        trainer.train()
        assert len(played) == 3 * 8  # every rollout of the three steps, none in this process
        # step 1 plays the weights the backend was made with; steps 2 and 3 the ones synced after 1 and 2
        assert versions[0] == {None} and all(len(v) == 1 and None not in v for v in versions[1:])
        assert len({next(iter(v)) for v in versions[1:]}) == 2
        assert [h["episodes"] for h in trainer.history] == [8, 8, 8]
        rows = run.store.query("SELECT count(*), count(DISTINCT episode_id) FROM episodes WHERE purpose = 'grpo'")[1]
        assert rows[0][0] == rows[0][1] == 24
        # every model call came back with its token ids and log-probs (2 turns x 8 rollouts) ...
        assert [h["samples"] for h in trainer.history] == [16, 16, 16]
        # ... and a worker's log-probs are the learner's after the last sync
        episodes, groups = trainer.rollout(99, trainer.tasks[:2])
        assert len(played) == 3 * 8 + 8
        _, samples = trainer._collect(episodes, groups)
        with torch.no_grad():
            learner = completion_logprobs(trainer.model, [s.prompt_ids for s in samples],
                                          [s.completion_ids for s in samples]).cpu()
        rollout = torch.tensor([lp for s in samples for lp in s.rollout_logprobs])
        assert float((learner - rollout).abs().mean()) <= 1e-4
    finally:
        run.close()
        run.store.close()
