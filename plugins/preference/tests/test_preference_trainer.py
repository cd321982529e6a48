"""DPO and Step-DPO on the tiny random model: the loss by hand, a two-step run that learns the pairs and
commits its checkpoint as a program, and `evolver train --step-dpo` from the command line."""
import math
from pathlib import Path

import pytest
import torch

from evolver import plugins
from evolver.config import Config, RoleConfig
from evolver.programs import ProgramRepo
from evolver.run import Run
from evolver.store import Store
from evolver_preference.trainer import DPOTrainer, StepDPOTrainer, dpo_loss
from prefdata import multi_step, single_step

GRPO_TESTS = Path(__file__).resolve().parents[2] / "grpo" / "tests"


def test_dpo_loss_by_hand():
    t = torch.tensor
    # z = 0.5 * ((-1 - -1.5) - (-2 - -1.5)) = 0.5; -log sigmoid(0.5) = log(1 + e^-0.5)
    loss, chosen, rejected = dpo_loss(t([-1.0]), t([-2.0]), t([-1.5]), t([-1.5]), beta=0.5)
    assert float(loss) == pytest.approx(math.log1p(math.exp(-0.5)), abs=1e-6) == pytest.approx(0.474077, abs=1e-6)
    assert float(chosen) == pytest.approx(0.25) and float(rejected) == pytest.approx(-0.25)
    # cDPO: 0.9 * log(1 + e^-0.5) + 0.1 * log(1 + e^0.5)
    loss, _, _ = dpo_loss(t([-1.0]), t([-2.0]), t([-1.5]), t([-1.5]), beta=0.5, label_smoothing=0.1)
    assert float(loss) == pytest.approx(0.9 * 0.474077 + 0.1 * 0.974077, abs=1e-5)
    # the policy equal to the reference: log 2 and no margin, whatever the log-probs
    loss, c, r = dpo_loss(t([-3.0, -7.0]), t([-9.0, -1.0]), t([-3.0, -7.0]), t([-9.0, -1.0]), beta=0.1)
    assert loss.tolist() == pytest.approx([math.log(2)] * 2) and (c - r).abs().max() == 0


def make_run(tmp_path, tiny_dir, episodes, **options):
    plugins.load_local(GRPO_TESTS / "letterbench.py")
    roles = {r: RoleConfig(backend="transformers", model=str(tiny_dir), options={"dtype": "fp32"})
             for r in ("executor", "proposer", "builder", "judge")}
    cfg = Config(benchmark="letters", benchmark_options={"steps": 1}, store=str(tmp_path / "store"), roles=roles,
                 plugins={"dpo": {"autocast": False, **options}})
    store = Store(tmp_path / "store" / "evolver.duckdb")
    store.add_episodes(episodes)
    run = Run(cfg, store, ProgramRepo(tmp_path / "store"))
    run.record()
    from evolver.seeding import ensure_seed

    ensure_seed(run)
    return run


def test_two_dpo_steps_learn_the_pairs_and_commit_a_checkpoint(tmp_path, tiny_dir):
    run = make_run(tmp_path, tiny_dir, single_step() + multi_step(), steps=2, lr=1e-2, beta=0.5, batch_size=8,
                   micro_batch=2)
    rows = []
    trainer = DPOTrainer(run, run.config.plugins["dpo"], progress=rows.append)
    summary = trainer.train()
    first, second = trainer.history
    assert rows == trainer.history and trainer.total_steps == 2
    assert summary["pairs"] == 5  # a0: 3, a1: 1, b0: 1 (the three-turn trajectory)
    # step 1: the policy is the reference, so the loss is log 2 and no pair is ranked yet
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-4) and abs(first["margin"]) < 1e-4
    # the update moved the implicit rewards the right way on the same pairs
    assert second["loss"] < first["loss"] and second["margin"] > 0.05 and second["reward_acc"] >= 0.8
    stored = run.store.query("SELECT step FROM train_steps WHERE run_id = ? ORDER BY step", [run.id])[1]
    assert [r[0] for r in stored] == [1, 2]
    manifest = run.repo.manifest(summary["program"])
    assert manifest["operator"] == "dpo" and manifest["model"] == summary["checkpoint"]
    assert (run.workspace / manifest["model"] / "config.json").is_file()
    run.close()


@pytest.mark.parametrize("lora", [False, True])
def test_step_dpo_trains_on_the_divergent_step_only(tmp_path, tiny_dir, lora):
    run = make_run(tmp_path, tiny_dir, multi_step(), steps=2, lr=1e-2, lora=lora, lora_targets=["q_proj", "v_proj"])
    trainer = StepDPOTrainer(run, run.config.plugins["dpo"])
    summary = trainer.train()
    assert summary["pairs"] == 1 and trainer.data[0].pair.step == 1
    assert len(trainer.data[0].chosen) == len(trainer.data[0].rejected) == 1
    # LoRA: zero-initialised adapters, so the first step starts from the reference too
    assert trainer.history[0]["margin"] == pytest.approx(0, abs=1e-5) and trainer.history[1]["margin"] > 0
    assert run.repo.manifest(summary["program"])["operator"] == "step-dpo"
    run.close()


def test_no_pairs_says_why(tmp_path, tiny_dir):
    from evolver import EvolverError

    run = make_run(tmp_path, tiny_dir, single_step()[:1])
    with pytest.raises(EvolverError, match="no episode pairs for dpo"):
        DPOTrainer(run, run.config.plugins["dpo"]).train()
    run.close()


def test_cli_step_dpo_then_eval_plays_the_checkpoint(tmp_path, tiny_dir, monkeypatch):
    from click.testing import CliRunner

    from evolver.cli import cli
    from letterbench import cli_args

    args = cli_args(tmp_path, tiny_dir, monkeypatch)
    monkeypatch.setenv("EVOLVER_PLUGINS", "transformers,grpo,preference")
    plugins.reset()
    with Store(tmp_path / "store" / "evolver.duckdb") as store:
        store.add_episodes(single_step())
    r = CliRunner().invoke(cli, args + ["train", "--step-dpo", "--steps", "1", "--set=plugins.step-dpo.lr=1e-3",
                                        "--set=plugins.step-dpo.autocast=false"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "loss 0.693" in r.output and "committed as program" in r.output
    program = next(ln.split("program ")[1].split()[0] for ln in r.output.splitlines() if "committed as program" in ln)
    r = CliRunner().invoke(cli, args + ["eval", "--program", program, "--per-category", "1"], catch_exceptions=False)
    assert r.exit_code == 0 and "checkpoints" in r.output, r.output
