"""On-policy self-distillation (trainer ``distill``, proposer ``internalise``) on a tiny random Llama:
the divergences against hand-computed values, a few steps pulling the skill-less student towards the
with-skills teacher, and the proposer's candidate: no skills, the new checkpoint as its model."""
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
import torch

from evolver import plugins
from evolver.config import Config, RoleConfig
from evolver.programs import ProgramRepo
from evolver.run import Run
from evolver.skills import write_skill
from evolver.store import Store
from evolver_grpo.distill import DistillTrainer, distill_divergence, token_divergence
from letterbench import cli_args

HERE = Path(__file__).resolve().parent
SKILL = ("letter-a", "Use when asked to write letters.", "Write only the letter a, again and again: aaaa aaaa.")


# ----------------------------------------------------------------------------------- the divergences
def test_divergences_against_hand_computed_values():
    t, s = [0.7, 0.2, 0.1], [0.4, 0.4, 0.2]
    forward = 0.7 * math.log(0.7 / 0.4) + 0.2 * math.log(0.2 / 0.4) + 0.1 * math.log(0.1 / 0.2)
    reverse = 0.4 * math.log(0.4 / 0.7) + 0.4 * math.log(0.4 / 0.2) + 0.2 * math.log(0.2 / 0.1)
    m = [0.55, 0.3, 0.15]
    jsd = 0.5 * sum(a * math.log(a / b) for a, b in zip(t, m)) + 0.5 * sum(a * math.log(a / b) for a, b in zip(s, m))
    m3 = [0.25 * a + 0.75 * b for a, b in zip(t, s)]  # jsd_beta = 0.25
    jsd3 = (0.25 * sum(a * math.log(a / b) for a, b in zip(t, m3))
            + 0.75 * sum(a * math.log(a / b) for a, b in zip(s, m3)))
    T, S = torch.tensor([t]).log(), torch.tensor([s]).log()
    assert token_divergence(S, T, "forward").item() == pytest.approx(forward, abs=1e-6)
    assert token_divergence(S, T, "reverse").item() == pytest.approx(reverse, abs=1e-6)
    assert token_divergence(S, T, "jsd").item() == pytest.approx(jsd, abs=1e-6)
    assert token_divergence(S, T, "jsd", beta=0.25).item() == pytest.approx(jsd3, abs=1e-6)
    assert forward != pytest.approx(reverse)  # the example tells them apart
    # zero, with a zero gradient, where the teacher is the student; positive elsewhere
    logits = torch.randn(5, 11, requires_grad=True)
    for kind in ("forward", "reverse", "jsd"):
        same = token_divergence(logits.log_softmax(-1), logits.detach().log_softmax(-1), kind)
        assert same.abs().max().item() < 1e-6
        (grad,) = torch.autograd.grad(same.sum(), logits)
        assert grad.abs().max().item() < 1e-6
        other = token_divergence(logits.log_softmax(-1), torch.randn(5, 11).log_softmax(-1), kind)
        assert (other > 0).all()
    with pytest.raises(ValueError, match="choose from"):
        token_divergence(S, T, "tv")


# ----------------------------------------------------------------------------------- the trainer
def make_run(tmp_path, tiny_dir, **distill):
    plugins.load_local(HERE / "letterbench.py")
    roles = {r: RoleConfig(backend="transformers", model=str(tiny_dir), options={"dtype": "fp32"})
             for r in ("executor", "proposer", "builder", "judge")}
    cfg = Config(benchmark="letters", benchmark_options={"steps": 1}, store=str(tmp_path / "store"), roles=roles,
                 plugins={"distill": {"max_new_tokens": 6, "autocast": False, **distill}})
    run = Run(cfg, Store(tmp_path / "store" / "evolver.duckdb"), ProgramRepo(tmp_path / "store"))
    run.record()
    from evolver.seeding import ensure_seed

    seed = ensure_seed(run)
    skilled = run.commit_child(seed, "with-skill", {"parent": "seed", "operator": "test"}, "a skill",
                               edit=lambda path: write_skill(path / "skills", *SKILL))
    return run, skilled


def test_teacher_prompt_is_the_student_prompt_with_the_skills(tmp_path, tiny_dir):
    run, skilled = make_run(tmp_path, tiny_dir)
    trainer = DistillTrainer(run, dict(run.config.plugins["distill"], program=skilled.id, samples_per_task=2))
    trainer.setup()
    episodes = trainer.rollout(0, trainer.tasks[:2])
    batch = trainer.samples(episodes)
    assert len(batch) == 4
    tok = run.backend("executor").tokenizer
    for student, teacher, completion in batch:
        s, t = tok.decode(student), tok.decode(teacher)
        assert SKILL[2] not in s and SKILL[2] in t and "letter-a" in t  # the injected body and the index
        assert t.endswith(s[s.index("<|im_start|>user"):])  # the user turn is the student's, as it was
    # with the same prompt the teacher is the student: zero divergence at every token
    same = distill_divergence(trainer.model, [b[0] for b in batch], [b[0] for b in batch], [b[2] for b in batch])
    assert same.numel() == sum(len(b[2]) for b in batch) and same.abs().max().item() < 1e-5
    assert (trainer.divergence(batch) > 0).all()
    copy = Path(trainer.ctx.program.root)
    assert copy.is_dir() and not (copy / "skills" / SKILL[0]).exists()  # the student's copy, without the skill
    scratch = lambda: list(Path(tempfile.gettempdir()).glob(f"evolver-sbx-{os.getpid()}-*"))  # noqa: E731
    assert scratch()  # the sandboxed harness that wrote the teacher's prompts
    trainer.close()
    trainer.close()  # twice is harmless
    assert not copy.exists() and not scratch()
    run.close()


def test_a_few_steps_pull_the_student_towards_the_teacher(tmp_path, tiny_dir):
    run, skilled = make_run(tmp_path, tiny_dir)
    trainer = DistillTrainer(run, dict(run.config.plugins["distill"], program=skilled.id, divergence="jsd",
                                       lr=3e-3, tasks_per_step=2, samples_per_task=2))
    trainer.setup()
    fixed = trainer.samples(trainer.rollout(99, trainer.tasks[:3]))  # a held batch, measured before and after
    before = trainer.divergence(fixed).mean().item()
    for step in range(3):
        trainer.step(step)
    after = trainer.divergence(fixed).mean().item()
    assert after < 0.7 * before, (before, after)
    rows = run.store.query("SELECT step FROM train_steps WHERE run_id = ? ORDER BY step", [run.id])[1]
    assert [r[0] for r in rows] == [1, 2, 3]
    assert trainer.history[0]["privileged_tokens"] > len(SKILL[2])  # the skills' share of the teacher's prompt
    assert ":3" in run.backend("executor").model  # the engine plays the new weights
    trainer.close()
    run.close()


def test_gold_as_privileged_context(tmp_path, tiny_dir):
    run, _ = make_run(tmp_path, tiny_dir)
    trainer = DistillTrainer(run, dict(run.config.plugins["distill"], privileged="gold"))
    trainer.setup()
    task = trainer.tasks[0]
    assert trainer.privileged.teacher_ids(task, [{"role": "system", "content": "Play."}]) is None  # no gold
    task.gold = ["aaaa", "abab"]
    ids = trainer.privileged.teacher_ids(task, [{"role": "system", "content": "Play."},
                                                {"role": "user", "content": "Go"}])
    text = run.backend("executor").tokenizer.decode(ids)
    assert "Play.\n\nA correct way to solve this task (shown to you alone): aaaa -> abab" in text
    trainer.close()
    with pytest.raises(Exception, match="split must be 'train'"):
        DistillTrainer(run, {"privileged": "gold", "split": "dev"})
    with pytest.raises(Exception, match="no skills to distil"):  # the seed has none
        DistillTrainer(run, dict(run.config.plugins["distill"], program="seed")).setup()
    run.close()


# ----------------------------------------------------------------------------------- CLI and proposer
def seeded_args(tmp_path, tiny_dir, monkeypatch) -> list[str]:
    """`evolver` arguments whose seed program has one short skill (the tiny tokenizer is per character)."""
    folder = write_skill(tmp_path / "seed-skills", *SKILL)
    return cli_args(tmp_path, tiny_dir, monkeypatch) + ["--set=roles.executor.options={dtype = \"fp32\"}",
                                                        f"--set=seed_skills=[\"{folder}\"]"]


def test_evolver_train_distill_commits_a_program_without_skills(tmp_path, tiny_dir, monkeypatch):
    from click.testing import CliRunner

    from evolver.cli import cli

    args = seeded_args(tmp_path, tiny_dir, monkeypatch)
    r = CliRunner().invoke(cli, args + ["train", "--distill", "--steps", "1", "--set=plugins.distill.max_new_tokens=4",
                                        "--set=plugins.distill.tasks_per_step=1"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    repo = ProgramRepo(tmp_path / "store")
    with Store(tmp_path / "store" / "evolver.duckdb") as store:
        _, rows = store.query("SELECT program_id, manifest FROM programs WHERE operator = 'distill'")
    (pid, manifest), = rows
    manifest = json.loads(manifest)
    assert manifest["parent"] == "seed" and (tmp_path / "store" / manifest["model"] / "config.json").is_file()
    child = repo.checkout(pid)
    assert not [p for p in (Path(child.root) / "skills").iterdir() if p.is_dir()]
    assert (Path(repo.checkout("seed").root) / "skills" / SKILL[0]).is_dir()


def test_run_with_the_internalise_proposer(tmp_path, tiny_dir, monkeypatch):
    from click.testing import CliRunner

    from evolver.cli import cli
    from evolver.run import LOOP_RUN_ID

    args = seeded_args(tmp_path, tiny_dir, monkeypatch)
    r = CliRunner().invoke(cli, args + [
        "run", "--proposer", "internalise", "--iterations", "1", "--set=loop.candidates_per_iteration=1",
        "--set=loop.dev_per_category=1", "--set=loop.test_per_category=1", "--set=loop.staged=false",
        "--set=loop.best_of_n=false", "--set=loop.monitor=off", "--set=plugins.internalise.steps=1",
        "--set=plugins.internalise.tasks_per_step=1",
        "--set=plugins.internalise.max_new_tokens=4"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    with Store(tmp_path / "store" / "evolver.duckdb") as store:
        run = store.latest_run(pattern=LOOP_RUN_ID)
        (prop,) = store.proposals(run["run_id"])
        assert prop["operator"] == "internalise" and prop["status"] in ("admitted", "discarded"), prop
        train_id = f"{run['run_id']}-internalise-it0"
        assert store.get_run(train_id)["status"] == "finished"
        _, rows = store.query("SELECT manifest FROM programs WHERE run_id = ? AND program_id = ?",
                              [run["run_id"], prop["candidate_id"]])
        manifest = json.loads(rows[0][0])
        assert manifest["model"] == f"checkpoints/{train_id}/step-1"
        # the candidate's episodes carry fewer context tokens than the seed's (no skills in its prompts)
        _, toks = store.query("SELECT program_id, max(context_tokens) FROM evaluations WHERE run_id = ? "
                              "AND split = 'dev' GROUP BY 1", [run["run_id"]])
    tokens = dict(toks)
    assert tokens[prop["candidate_id"]] < tokens["seed"]
    child = ProgramRepo(tmp_path / "store").checkout(prop["candidate_id"])
    assert not [p for p in (Path(child.root) / "skills").iterdir() if p.is_dir()]
