"""Cold-start SFT on a tiny random Llama: the bank is seeded from gold first, every sample's prompt is
what the program's harness renders in a real episode (skills included), targets are the written
actions plus the end-of-turn token, the loss falls, and the checkpoint is committed like GRPO's."""
import json
from pathlib import Path

import pytest
import torch
from skillrl_helpers import HERE, fresh_plugins, make_run  # noqa: F401
from tinymodel import build_tiny_model

from evolver.backends.scripted import ScriptedBackend
from evolver.config import RoleConfig
from evolver.evaluate import run_episodes
from evolver.types import Message
from evolver_skillrl.bank import counts, load_bank
from evolver_skillrl.sft import SkillSFTTrainer as SFTTrainer
from evolver_training.logprobs import prefix_groups
from evolver_training.sft import SFTSample, micro_batches


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), max_positions=2048)


def sft_run(tmp_path, tiny_dir, **sft):
    roles = {r: RoleConfig(backend="transformers", model=str(tiny_dir), options={"dtype": "fp32"})
             for r in ("executor", "proposer", "builder", "judge")}
    options = {"per_category": 1, "batch_size": 3, "lr": 1e-2, "epochs": 2, "autocast": False, **sft}
    return make_run(tmp_path, roles=roles, skillrl={"teacher": "rules", "gold_per_category": 2, "top_k": 1},
                    extra_plugins={"sft": options})


def test_sft_trains_on_skill_conditioned_gold_steps_as_the_harness_renders_them(tmp_path, tiny_dir):
    run = sft_run(tmp_path, tiny_dir)
    trainer = SFTTrainer(run)
    summary = trainer.train()
    # the bank was seeded from gold first (a commit), and the SFT checkpoint is its child
    log = {r["id"]: r for r in run.repo.log()}
    bank_program = log[summary["bank_program"]]
    assert bank_program["operator"] == "seed-bank" and bank_program["parent"] == "seed"
    # its harness chooses by writing, as the model is trained to (the seed's already does)
    assert "\nWRITE_CHOICE = True" in (Path(trainer.program.root) / "harness" / "harness.py").read_text()
    assert counts(load_bank(trainer.program.root))["general"] == 1
    ckpt = run.repo.manifest(summary["program"])
    assert ckpt["operator"] == "sft" and ckpt["parent"] == summary["bank_program"]
    assert (run.workspace / ckpt["model"] / "config.json").is_file()
    # 2 categories x 1 task x 3 gold steps
    assert summary["trajectories"] == 2 and summary["samples"] == 6 and summary["dropped"] == 0
    backend = trainer.engine.backend
    gold = trainer.episodes[0]
    step0 = gold.steps[0]
    assert "## Skill: general-act-on-the-goal" in json.loads(step0.prompt)[0]["content"]
    sample = trainer.samples[0] if trainer.samples[0].task_id == gold.task.id else None
    assert sample is not None
    assert sample.prompt_ids == backend.chat_ids([Message(**m) for m in json.loads(step0.prompt)])
    assert sample.completion_ids[-1] == backend.end_id
    assert backend.tokenizer.decode(sample.completion_ids[:-1]) == gold.task.gold[0]
    # the same task played for real by the same program: the first prompt is identical
    scripted = ScriptedBackend(rule=lambda r: "wait")
    played = run_episodes(run.context(trainer.program), run.benchmark, scripted, [gold.task])[0]
    assert played.steps[0].prompt == step0.prompt
    assert scripted.choice_calls and all(c.write for c in scripted.choice_calls)
    # it learned: the loss fell, and every step is in train_steps
    losses = [r["loss"] for r in summary["history"]]
    assert sum(losses[-2:]) / 2 < losses[0] * 0.7, losses
    rows = run.store.query("SELECT count(*) FROM train_steps WHERE run_id = ?", [run.id])[1][0][0]
    assert rows == len(losses) == summary["steps"]
    run.close()


def test_write_choice_is_committed_once_and_only_where_the_harness_has_the_knob(tmp_path, tiny_dir):
    from evolver.seeding import ensure_seed
    from evolver_training.sft import commit_write_choice

    run = sft_run(tmp_path, tiny_dir)
    seed = ensure_seed(run)

    def variant(cid, old, new):
        def edit(path):
            harness = path / "harness" / "harness.py"
            harness.write_text(harness.read_text().replace(old, new))
        return run.repo.checkout(run.commit_child(seed, cid, {"parent": seed.id, "operator": "test"}, cid, edit).id)
    ranks = variant("ranks", "WRITE_CHOICE = True", "WRITE_CHOICE = False")
    child = commit_write_choice(run, ranks)
    assert child.id != ranks.id and run.repo.manifest(child.id)["operator"] == "write-choice"
    assert "\nWRITE_CHOICE = True" in (Path(child.root) / "harness" / "harness.py").read_text()
    assert commit_write_choice(run, child).id == child.id  # already writes: no new commit
    assert commit_write_choice(run, seed).id == seed.id
    # an evolved harness without the knob decides for itself
    plain = variant("no-knob", "WRITE_CHOICE = True", "WRITES = True")
    assert commit_write_choice(run, plain).id == plain.id
    run.close()


def test_micro_batches_accumulate_the_whole_batch_gradient(tmp_path, tiny_dir):
    run = sft_run(tmp_path, tiny_dir)
    trainer = SFTTrainer(run)
    trainer.setup()
    batch = trainer.samples[:5]
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in batch]
    assert any(L for L, _ in prefix_groups([s.prompt_ids for s in batch], lengths, 8))  # prefixes to share
    start = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    got = []
    for micro, share in ((5, 0), (2, 0), (1, 0), (2, 8), (1, 8)):
        trainer.model.load_state_dict(start)
        trainer.cfg.micro_batch, trainer.cfg.share_prefix = micro, share
        row = trainer.step(1, batch)
        got.append((row["loss"], {n: p.grad.clone() for n, p in trainer.model.named_parameters()}))
    (loss, grads), rest = got[0], got[1:]
    for other_loss, other in rest:
        assert other_loss == pytest.approx(loss, rel=1e-5)
        for name, g in grads.items():
            assert (other[name] - g).norm() <= 1e-5 * g.norm() + 1e-9, name
    run.close()


def sample(prompt, completion=(2,), episode=0):
    return SFTSample(list(prompt), list(completion), "t", episode)


def test_micro_batches_keep_shared_prefixes_together_within_the_memory_budget():
    system = list(range(100, 140))
    batch = [sample(system + [i, i + 1], episode=0) for i in range(5)] + [sample([7] * 30, episode=1),
                                                                          sample([8] * 10, episode=1)]
    for rows in (1, 2, 3):
        mbs = micro_batches(batch, rows, share=16)
        assert sorted(id(s) for mb in mbs for s in mb) == sorted(map(id, batch))  # each sample once
        budget = rows * max(len(s.prompt_ids) + 1 for s in batch)
        for mb in mbs:
            groups = prefix_groups([s.prompt_ids for s in mb], [len(s.prompt_ids) + 1 for s in mb], 16)
            computed = sum(sum(len(mb[i].prompt_ids) + 1 for i in g) - L * (len(g) - 1) for L, g in groups)
            assert computed <= budget or len(mb) == 1
        # unrelated samples go `rows` at a time, as without sharing
        assert sum(1 for mb in mbs if mb[0].prompt_ids[0] != 100) == (2 + rows - 1) // rows
    # two rows' worth of tokens hold all five steps of the episode (40 shared + 5 x 3 own tokens)
    assert any(len(mb) == 5 for mb in micro_batches(batch, 2, share=16))
    assert [len(mb) for mb in micro_batches(batch, 2, share=0)] == [2, 2, 2, 1]


def test_batches_by_episode_hold_consecutive_steps_and_cover_every_sample(tmp_path, tiny_dir):
    run = sft_run(tmp_path, tiny_dir, per_category=2, epochs=2, batch_size=4, batch_by="episode")
    trainer = SFTTrainer(run)
    trainer.setup()
    n = len(trainer.samples)
    for epoch in (0, 1):
        batches = list(trainer.batches())[epoch * -(-n // 4):(epoch + 1) * -(-n // 4)]
        flat = [s for b in batches for s in b]
        assert sorted(map(id, flat)) == sorted(map(id, trainer.samples))
        # an episode's steps are consecutive
        seen = [s.episode for s in flat]
        assert all(seen.index(e) + seen.count(e) - 1 == len(seen) - 1 - seen[::-1].index(e) for e in set(seen))
    run.close()


def test_sft_refuses_bad_options_and_missing_data(tmp_path, tiny_dir):
    from evolver.errors import ConfigError, EvolverError

    run = sft_run(tmp_path, tiny_dir, split="train")
    with pytest.raises(ConfigError, match="plugins.sft.split"):
        SFTTrainer(run, {"split": "dev"})
    with pytest.raises(ConfigError, match="plugins.sft.bogus"):
        SFTTrainer(run, {"bogus": 1})
    trainer = SFTTrainer(run, {"source": "store", "per_category": 1})  # nothing successful stored yet
    with pytest.raises(EvolverError, match="no successful training trajectories"):
        trainer.train()
    run.close()


def test_cli_train_sft(tmp_path, tiny_dir, monkeypatch):
    from click.testing import CliRunner

    from evolver import plugins
    from evolver.cli import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVOLVER_PLUGINS", "transformers,skillrl")
    plugins.reset()
    roles = ("executor", "proposer", "builder", "judge")
    args = ["--plugin", str(HERE / "skillrl_pathbench.py"), "--store", str(tmp_path / "store"),
            "--set=benchmark=paths", "--set=benchmark_options={}",
            *[f"--set=roles.{r}.backend=transformers" for r in roles],
            *[f"--set=roles.{r}.model={tiny_dir}" for r in roles],
            "--set=plugins.skillrl.teacher=rules", "--set=plugins.skillrl.embedder=hashing"]
    r = CliRunner().invoke(cli, args + ["train", "--sft", "--steps", "2", "--set=plugins.sft.per_category=1",
                                        "--set=plugins.sft.autocast=false", "--set=plugins.sft.batch_size=2"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "sft: 2/2 steps  " in r.output and "  loss " in r.output and "committed as program sft-" in r.output
    r = CliRunner().invoke(cli, args + ["train", "--sft", "--skillrl"])
    assert r.exit_code != 0 and "two trainers" in r.output


def test_a_stopped_sft_resumes_exactly_and_resume_needs_a_saved_state(tmp_path, tiny_dir):
    import torch

    from evolver.errors import EvolverError
    from evolver.run import Run
    from evolver_skillrl.trainer import SkillRLTrainer

    whole = SFTTrainer(sft_run(tmp_path / "whole", tiny_dir, steps=4, save_every=2, epochs=3))
    full = whole.train()
    run = sft_run(tmp_path / "cut", tiny_dir, steps=3, save_every=2, epochs=3)  # "killed" after step 3
    with pytest.raises(EvolverError, match="kept no SFT state"):
        SFTTrainer(run).train(resume=True)  # nothing saved yet
    first = SFTTrainer(run).train()
    assert first["steps"] == 3
    again = Run(run.config, run.store, run.repo, run_id=run.id, resumed=True)
    again.config.plugins["sft"]["steps"] = 4
    resumed = SFTTrainer(again)
    summary = resumed.train(resume=True)
    # it went on from step 2 (the newest state), on the same bank program, to the same weights
    assert [r["step"] for r in summary["history"]] == [1, 2, 3, 4]
    assert summary["bank_program"] == first["bank_program"]
    assert [r["loss"] for r in summary["history"]] == pytest.approx([r["loss"] for r in full["history"]], abs=1e-5)
    for (name, a), b in zip(whole.model.named_parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    _, rows = run.store.query("SELECT step FROM train_steps WHERE run_id = ? ORDER BY step", [run.id])
    assert [r[0] for r in rows] == [1, 2, 3, 4]
    with pytest.raises(EvolverError, match="saved no checkpoint"):
        SkillRLTrainer(run, {"eval_per_category": 1}).train(resume=True)  # this run trained no skillrl steps
    run.close()

def test_learning_rate_warms_up_then_follows_the_schedule(tmp_path, tiny_dir):
    from evolver_training.optim import lr_at

    peak = 1e-4
    # 10 steps, warm-up over 2: a linear rise that never reaches 0 or overshoots, then the schedule
    linear = [lr_at(n, 10, peak, 0.2, "linear") for n in range(1, 11)]
    assert linear[:2] == pytest.approx([peak / 3, 2 * peak / 3])
    assert linear[2] == pytest.approx(peak) and linear[-1] == pytest.approx(peak / 8)
    assert all(a > b for a, b in zip(linear[2:], linear[3:]))  # strictly decaying, last step still > 0
    cosine = [lr_at(n, 10, peak, 0.2, "cosine") for n in range(1, 11)]
    assert cosine[2] == pytest.approx(peak) and 0 < cosine[-1] < linear[-1]
    assert [lr_at(n, 10, peak, 0.0, "constant") for n in (1, 10)] == [peak, peak]
    # the trainer applies it, and every step's rate lands in train_steps
    run = sft_run(tmp_path, tiny_dir, warmup=0.2, schedule="linear", batch_size=2, lr=1e-3)
    summary = SFTTrainer(run).train()
    rates = [r["lr"] for r in summary["history"]]
    assert rates == pytest.approx([lr_at(n, len(rates), 1e-3, 0.2, "linear") for n in range(1, len(rates) + 1)])
    stored = run.store.query("SELECT json_extract(metrics, '$.lr')::DOUBLE FROM train_steps WHERE run_id = ? "
                             "ORDER BY step", [run.id])[1]
    assert [r[0] for r in stored] == pytest.approx(rates)
    run.close()
