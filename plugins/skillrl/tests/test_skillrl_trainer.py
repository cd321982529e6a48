"""`evolver train --skillrl` on a tiny random Llama: the bank is seeded, every rollout of a group sees the
same bank version, the bank evolves between steps from failed GRPO rollouts on training tasks, an
evolution that makes validation worse is undone, and growth is recorded per validation."""
import pytest
from skillrl_helpers import episode, fresh_plugins, make_run  # noqa: F401
from tinymodel import build_tiny_model

from evolver.config import RoleConfig
from evolver.errors import ConfigError
from evolver_skillrl.trainer import SkillRLTrainer


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), max_positions=4096)


def skillrl_run(tmp_path, tiny_dir, **skillrl):
    roles = {r: RoleConfig(backend="transformers", model=str(tiny_dir), options={"dtype": "fp32"})
             for r in ("executor", "proposer", "builder", "judge")}
    grpo = {"max_new_tokens": 4, "autocast": False, "group_size": 2, "tasks_per_step": 2, "steps": 2,
            "eval_every": 1, "eval_per_category": 1, "beta": 0.0, "lr": 1e-3}
    return make_run(tmp_path, roles=roles, extra_plugins={"grpo": grpo},
                    skillrl={"teacher": "rules", "gold_per_category": 1, "top_k": 1, "category_threshold": 1.1,
                             "failures_per_category": 1, "new_per_category": 1, "tolerance": 1.0, **skillrl})


def test_bank_pinned_per_group_and_evolved_between_steps(tmp_path, tiny_dir):
    run = skillrl_run(tmp_path, tiny_dir)
    trainer = SkillRLTrainer(run)
    summary = trainer.train()
    # every group's rollouts were played with one bank version ...
    assert trainer.pins and all(len(hashes) == 1 for hashes in trainer.pins.values())
    # ... and the bank changed between steps (seeded, then evolved after validations)
    versions = [next(iter(h)) for g, h in sorted(trainer.pins.items(), key=lambda kv: int(kv[0].split(":")[0]))]
    assert len(set(versions)) >= 2, versions
    growth = summary["bank_growth"]
    assert [g["step"] for g in growth] == [1]
    assert growth[0]["evolution"]["weak"] == ["boxes", "doors"] and growth[0]["evolution"]["added"] >= 1
    assert growth[0]["lesson"] >= 1 and {"general", "task", "lesson", "program"} <= set(growth[0])
    # the lessons came from this run's failed GRPO rollouts, which were played on training tasks
    assert 1 <= growth[0]["evolution"]["failures"] <= 2  # one per category of step 1's tasks
    stored = run.store.query("SELECT count(*) FROM train_steps WHERE run_id = ? AND metrics->>'event' = 'bank'",
                             [run.id])[1][0][0]
    assert stored == 1
    ckpt = run.repo.manifest(summary["program"])
    assert ckpt["operator"] == "grpo" and (run.workspace / ckpt["model"] / "config.json").is_file()
    run.close()


def test_a_worse_validation_restores_the_previous_bank(tmp_path, tiny_dir):
    run = skillrl_run(tmp_path, tiny_dir, tolerance=0.0)
    trainer = SkillRLTrainer(run, dict(run.config.plugins["skillrl"], steps=1))
    trainer.setup()
    before = trainer.program

    class Ev:
        score, per_category = 0.5, {"doors": 0.0, "boxes": 0.0}
    # failed GRPO rollouts on training tasks (as a step would have stored them), and a dev one that must not count
    train, dev = run.benchmark.tasks("train", 1), run.benchmark.tasks("dev", 1)
    eps = [episode(t, ["wait"], 0.0, purpose="grpo") for t in train] + [episode(dev[0], ["wait"], 0.0, purpose="grpo")]
    for e in eps:
        e.run_id, e.program_id = run.id, before.id
    run.store.add_episodes(eps)
    trainer.after_validation(1, Ev)
    assert trainer.growth[0]["evolution"]["failures"] == 2  # the dev rollout was not distilled
    evolved = trainer.program
    assert evolved.id != before.id and trainer.pending["previous"].id == before.id
    Ev.score = 0.25  # worse than 0.5: the evolved bank goes
    row = trainer.after_validation(2, Ev)
    assert row["kept"] is False
    # back to the earlier bank, then evolved again from it (its failures are still unanswered)
    assert trainer.program.id != evolved.id and run.repo.manifest(trainer.program.id)["parent"] == before.id
    run.close()


def test_skillrl_trainer_needs_validation(tmp_path, tiny_dir):
    run = skillrl_run(tmp_path, tiny_dir)
    with pytest.raises(ConfigError, match="eval_per_category"):
        SkillRLTrainer(run, {"eval_per_category": 0})
    with pytest.raises(ConfigError, match="plugins.skillrl.bogus"):
        SkillRLTrainer(run, {"bogus": 1})
    run.close()


def test_a_stopped_skillrl_run_resumes_with_its_bank_and_pending_evolution(tmp_path, tiny_dir):
    import torch

    from evolver.run import Run

    whole = SkillRLTrainer(skillrl_run(tmp_path / "whole", tiny_dir), {"steps": 3, "save_every": 1})
    full = whole.train()
    run = skillrl_run(tmp_path / "cut", tiny_dir)
    cut = SkillRLTrainer(run, {"steps": 3, "save_every": 1})
    step = cut.step

    def killed(i):  # the process dies while step 3 plays, after step 2's checkpoint
        if i == 2:
            raise KeyboardInterrupt
        return step(i)
    cut.step = killed
    with pytest.raises(KeyboardInterrupt):
        cut.train()
    again = Run(run.config, run.store, run.repo, run_id=run.id, resumed=True)
    resumed = SkillRLTrainer(again, {"steps": 3, "save_every": 1})
    summary = resumed.train(resume=True)
    # step 3 only was played again, with the bank the run had, to the same weights and the same record
    assert [h["step"] for h in summary["history"]] == [1, 2, 3]
    assert [h["reward_mean"] for h in summary["history"]] == [h["reward_mean"] for h in full["history"]]
    assert [e["step"] for e in summary["evals"]] == [0, 1, 2, 3]
    assert [g["step"] for g in summary["bank_growth"]] == [g["step"] for g in full["bank_growth"]]
    assert resumed.pins.keys() == whole.pins.keys()
    for (name, a), b in zip(whole.model.named_parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-5), name
    run.close()
