"""The GRPO trainer end to end on a tiny random Llama: rollouts through the harness, exact token ids,
log-prob agreement, updates, sync, checkpoints as program commits, and learning a toy reward."""
from pathlib import Path

import pytest
import torch

from evolver import plugins
from evolver.config import Config, RoleConfig
from evolver.programs import ProgramRepo
from evolver.run import Run
from evolver.store import Store
from evolver_training.logprobs import completion_logprobs
from evolver_grpo.trainer import GRPOTrainer

HERE = Path(__file__).resolve().parent


def make_run(tmp_path, tiny_dir, steps=1, categories=None, actions=False, backend_options=None, tools=False, **grpo):
    plugins.load_local(HERE / "letterbench.py")
    options = {"dtype": "fp32", **(backend_options or {})}
    roles = {r: RoleConfig(backend="transformers", model=str(tiny_dir), options=options)
             for r in ("executor", "proposer", "builder", "judge")}
    cfg = Config(benchmark="letters", benchmark_options={"steps": steps, "categories": categories, "actions": actions,
                                                                  "tools": tools}, store=str(tmp_path / "store"), roles=roles,
                 plugins={"grpo": {"max_new_tokens": 6, "autocast": False, **grpo}})
    store = Store(tmp_path / "store" / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(tmp_path / "store"))
    run.record()
    from evolver.seeding import ensure_seed

    ensure_seed(run)
    return run


@pytest.mark.parametrize("decode", ["loop", "static", pytest.param("graphs", marks=pytest.mark.skipif(
    "not __import__('torch').cuda.is_available()", reason="needs a CUDA GPU"))])
def test_two_steps_end_to_end(tmp_path, tiny_dir, decode):
    """``decode="static"``/``"graphs"``: the GPU's decode path (static KV cache; CUDA graphs where there is
    a GPU) plays the rollouts with the weights each update changes in place, and its log-probs are the
    learner's (the first ratio)."""
    run = make_run(tmp_path, tiny_dir, steps=2, group_size=4, tasks_per_step=2, backend_options={"decode": decode})
    trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"], steps=2, lr=1e-3))
    before = {k: v.clone() for k, v in trainer_model_state(run).items()}
    summary = trainer.train()
    rows = run.store.query("SELECT step, metrics FROM train_steps WHERE run_id = ? ORDER BY step", [run.id])[1]
    assert [r[0] for r in rows] == [1, 2]
    first = trainer.history[0]
    # 2 tasks x 4 rollouts x 2 turns, every call kept as a step-wise sample
    assert first["episodes"] == 8 and first["samples"] == 16 and first["groups"] == 2
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-6)  # mu = 1: the first ratio is exactly 1
    for key in ("reward_mean", "reward_std", "zero_var_frac", "kl", "clip_frac", "entropy", "response_len",
                "rollout_s", "logprob_s", "update_s", "sync_s"):
        assert key in first
    # the rollouts are ordinary episodes in the store, with their traces
    n = run.store.query("SELECT count(*) FROM episodes WHERE run_id = ? AND purpose = 'grpo'", [run.id])[1][0][0]
    assert n == 16
    # the update changed the trained weights, and the engine's identity changed with them
    after = trainer_model_state(run)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert ":2" in run.backend("executor").model
    engine = getattr(run.backend("executor"), "inner", run.backend("executor"))
    assert engine.decode_path == decode and engine.decode_error is None
    # the checkpoint is a program commit whose manifest points at a loadable HF folder
    prog = run.repo.manifest(summary["program"])
    assert prog["operator"] == "grpo" and prog["model"] == summary["checkpoint"]
    assert (run.workspace / prog["model"] / "config.json").is_file()
    run.close()


def test_rollouts_without_skills_leave_no_copy_of_the_program_behind(tmp_path, tiny_dir):
    """``skills = false`` plays a copy of the program with its skills taken out; train() removes it."""
    run = make_run(tmp_path, tiny_dir, group_size=2, tasks_per_step=1)
    trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"], steps=1, skills=False, commit=False))
    trainer.train()
    played = trainer.ctx.program
    assert played.id.endswith("+none-skills") and not Path(played.root).exists()
    run.close()


def trainer_model_state(run):
    return {k: v.detach().clone() for k, v in run.backend("executor").hf_model.state_dict().items()}


def test_rollout_logprobs_agree_with_the_learner_and_prompts_are_exact(tmp_path, tiny_dir):
    run = make_run(tmp_path, tiny_dir)
    trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"], group_size=3))
    trainer.setup()
    episodes, groups = trainer.rollout(0, trainer.tasks[:2])
    _, samples = trainer._collect(episodes, groups)
    assert len(samples) == 6
    backend = run.backend("executor")
    for ep, s in zip(episodes, samples):
        # the prompt ids are exactly what the chat template gives for the stored prompt
        import json

        from evolver.types import Message
        msgs = [Message(**m) for m in json.loads(ep.steps[0].prompt)]
        assert s.prompt_ids == backend.chat_ids(msgs)
    with torch.no_grad():
        learner = completion_logprobs(trainer.model, [s.prompt_ids for s in samples],
                                      [s.completion_ids for s in samples]).cpu()
    rollout = torch.tensor([lp for s in samples for lp in s.rollout_logprobs])
    assert float((learner - rollout).abs().mean()) <= 1e-4
    # G rollouts of one task differ (own seeds)
    assert len({tuple(s.completion_ids) for s in samples[:3]}) > 1
    run.close()


def test_tool_call_rollouts_train_on_the_masked_distribution(tmp_path, tiny_dir):
    """Rollouts of a tool-calling task are calls decoded under the tools' grammar; their samples name it, and
    the learner's log-probs (old, new, reference) are of the same masked distribution: the first ratio is 1."""
    from evolver import ToolCalls

    run = make_run(tmp_path, tiny_dir, tools=True, group_size=4, tasks_per_step=2, max_new_tokens=80)
    trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"], steps=1, lr=1e-3, mu=2))
    trainer.setup()
    episodes, groups = trainer.rollout(0, trainer.tasks[:2])
    _, samples = trainer._collect(episodes, groups)
    played = [(ToolCalls.parse(ep.steps[0].action), ep) for ep in episodes if ep.steps and not ep.steps[0].error]
    assert played and all(ToolCalls.validate(c, ep.task.tools) is None for c, ep in played)
    assert samples and all(s.grammar and "write" in s.grammar for s in samples)
    masks = trainer._masks(samples)
    with torch.no_grad():
        masked = trainer._logprobs(trainer.model, samples, grad=False).cpu()
        plain = completion_logprobs(trainer.model, [s.prompt_ids for s in samples], [s.completion_ids for s in samples]).cpu()
    rollout = torch.tensor([lp for s in samples for lp in s.rollout_logprobs])
    assert float((masked - rollout).abs().max()) <= 1e-4 and float((plain - rollout).abs().max()) > 1e-2
    assert all(m is not None for m in masks)
    summary = trainer.train()  # mu = 2: the old log-probs are computed apart (under the masks), then reused
    assert summary and trainer.history[0]["ratio_mean"] == pytest.approx(1.0, abs=0.2)
    assert "_mask_memo" not in trainer.__dict__  # the step's masks were let go
    run.close()


def test_chunked_logprobs_equal_full_softmax_with_pad_equal_to_eos(tiny_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    prompts = [[1, 5, 2, 7, 2], [1, 9]]  # id 2 is pad AND eos, and occurs inside prompts
    comps = [[3, 4, 2], [8, 2, 2, 6]]
    got = completion_logprobs(model, prompts, comps, chunk=2)
    want = []
    for p, c in zip(prompts, comps):
        ids = torch.tensor([p + c])
        logits = model(input_ids=ids).logits[0].float().log_softmax(-1)
        want += [float(logits[len(p) - 1 + j, t]) for j, t in enumerate(c)]
    assert got.tolist() == pytest.approx(want, abs=1e-5)


def test_checkpoint_reloads_with_identical_logprobs(tmp_path, tiny_dir):
    from transformers import AutoModelForCausalLM

    from evolver_training.checkpoint import save

    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    save(model, None, tmp_path / "ckpt")
    again = AutoModelForCausalLM.from_pretrained(str(tmp_path / "ckpt"))
    prompts, comps = [[1, 5, 6, 7]], [[8, 9, 2]]
    assert torch.equal(completion_logprobs(model, prompts, comps), completion_logprobs(again, prompts, comps))


def test_lora_trains_only_adapters_and_keeps_a_reference(tmp_path, tiny_dir):
    run = make_run(tmp_path, tiny_dir)
    trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"], lora=True, lora_r=4, beta=0.1, lr=1e-2,
                                    group_size=4, tasks_per_step=2))
    trainer.setup()
    frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    lora = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert lora and all("lora" in n for n in lora)
    row = trainer.step(0)
    for n, p in trainer.model.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n])
    if row["trained_samples"]:
        assert any(not torch.equal(p, lora[n]) for n, p in trainer.model.named_parameters() if n in lora)
    run.close()


@pytest.mark.parametrize("sample_device", ["model", "cpu"])
def test_policy_learns_the_toy_reward(tmp_path, tiny_dir, sample_device):
    """20 steps on the tiny model: the mean reward of the last steps beats the first ones. (On a GPU the
    two sample devices draw different streams: on an H200 the "model" one did not learn in 20 steps.)"""
    run = make_run(tmp_path, tiny_dir, backend_options={"sample_device": sample_device})
    trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"], steps=20, lr=3e-3, group_size=6, tasks_per_step=2,
                                    beta=0.0, loss="token"))
    trainer.train()
    rewards = [r["score_mean"] for r in trainer.history]
    print("score per step:", " ".join(f"{r:.2f}" for r in rewards))
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + 0.05, rewards
    run.close()


def test_cli_train_then_eval_runs_the_checkpoint(tmp_path, tiny_dir, monkeypatch):
    from click.testing import CliRunner

    from evolver.cli import cli

    from letterbench import cli_args

    args = cli_args(tmp_path, tiny_dir, monkeypatch)
    r = CliRunner().invoke(cli, args + ["train", "--steps", "2", "--set=plugins.grpo.max_new_tokens=4",
                                        "--set=plugins.grpo.group_size=2", "--set=plugins.grpo.tasks_per_step=2",
                                        "--set=plugins.grpo.eval_per_category=1"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "eval after step 2" in r.output
    # Progress without a terminal: plain lines counting to the trainer's total, with its own columns.
    steps = [ln for ln in r.output.splitlines() if ln.startswith("grpo: ")]
    assert steps[0].startswith("grpo: 1/2 steps  [") and "  reward " in steps[0], r.output
    assert steps[-1].startswith("grpo: 2/2 steps  ") and "kl " in steps[-1] and "(rollout " in steps[-1], steps
    program = next(ln.split("program ")[1].split()[0] for ln in r.output.splitlines() if "committed as program" in ln)
    r = CliRunner().invoke(cli, args + ["eval", "--program", program, "--per-category", "1"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "the program's checkpoint" in r.output and "checkpoints" in r.output
    r = CliRunner().invoke(cli, args + ["train", "--set=plugins.grpo.bogus=1"])
    assert r.exit_code != 0 and "plugins.grpo.bogus" in r.output


def test_zero_variance_groups_are_counted_and_replaced(tmp_path, tiny_dir):
    run = make_run(tmp_path, tiny_dir, categories=["z"])
    plain = GRPOTrainer(run, dict(run.config.plugins["grpo"], group_size=3, tasks_per_step=2, beta=0.0))
    plain.setup()
    row = plain.step(0)
    assert row["zero_var_frac"] == 1.0 and row["trained_samples"] == 0 and row["reward_std"] == 0.0
    run.close()
    run = make_run(tmp_path / "b", tiny_dir, categories=["z", "a"])
    dyn = GRPOTrainer(run, dict(run.config.plugins["grpo"], group_size=3, tasks_per_step=2, dynamic_sampling=True,
                                max_resample_rounds=3, beta=0.0))
    dyn.setup()
    row = dyn.step(0)
    # every group kept for training has reward spread: the all-zero "z" groups were replaced
    assert row["groups"] > 2 and row["zero_var_frac"] > 0
    # the step's reward is every played rollout's, the replaced groups' included: the "z" groups
    # scored 0, so it is below the kept groups' mean
    from evolver_grpo import advantages as adv_mod
    for step in range(1, 5):  # until a step draws a "z" task (a shuffled cycle of both categories)
        out = dyn._play(step)
        played = [adv_mod.total(t, dyn.acfg) for t in out["rollouts"]]
        kept = [adv_mod.total(t, dyn.acfg) for t in out["trajs"]]
        if len(played) > len(kept):
            break
    assert len(played) > len(kept) and 0 < sum(played) / len(played) < sum(kept) / len(kept)
    played = {e.task.category for e in run.store.episodes(run_id=run.id)}
    assert played == {"z", "a"} and row["trained_samples"] > 0  # z groups played, a groups trained
    run.close()


def test_a_wall_time_limit_ends_training_at_the_step_past_which_the_next_would_not_fit(tmp_path, tiny_dir):
    run = make_run(tmp_path, tiny_dir)
    opts = dict(run.config.plugins["grpo"], group_size=2, tasks_per_step=1, steps=3, commit=False)
    summary = GRPOTrainer(run, dict(opts, max_wall_s=1e-3)).train()
    assert summary["steps"] == 1 and len(summary["history"]) == 1
    assert summary["checkpoint"].endswith("step-1") and (run.workspace / summary["checkpoint"]).is_dir()
    run.close()
    run = make_run(tmp_path / "b", tiny_dir)
    summary = GRPOTrainer(run, dict(opts, steps=2, max_wall_s=1e6)).train()
    assert summary["steps"] == 2 and summary["checkpoint"].endswith("step-2")
    run.close()


def test_choices_between_valid_actions_are_written_and_trained(tmp_path, tiny_dir):
    """With valid actions listed, the harness asks for a choice; during training the policy writes
    it (one line) and the closest option is played, and the written tokens are the sample."""
    run = make_run(tmp_path, tiny_dir, steps=2, actions=True)
    trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"], group_size=3))
    trainer.setup()
    episodes, groups = trainer.rollout(0, trainer.tasks[:1])
    _, samples = trainer._collect(episodes, groups)
    assert len(samples) == 6
    from letterbench import ACTIONS

    assert all(s.action in ACTIONS for e in episodes for s in e.steps)
    tok = run.backend("executor").tokenizer
    assert all("\n" not in tok.decode(s.completion_ids[:-1]) for s in samples)  # cut at the line's end
    run.close()


def test_resume_continues_where_the_checkpoint_left_off(tmp_path, tiny_dir):
    """2 steps, stop, resume to 4: the same weights as 4 uninterrupted steps, each step recorded once."""
    def final_weights(run):
        return {k: v.clone() for k, v in run.backend("executor").hf_model.state_dict().items()}
    opts = dict(group_size=3, tasks_per_step=2, lr=1e-2, save_every=1, beta=0.05)
    straight = make_run(tmp_path / "straight", tiny_dir)
    straight.config.roles["executor"].options["prefix_cache"] = 0  # bit-identical numerics on both paths
    GRPOTrainer(straight, dict(straight.config.plugins["grpo"], steps=4, **opts)).train()
    want = final_weights(straight)
    straight.close()

    run = make_run(tmp_path / "resumed", tiny_dir)
    run.config.roles["executor"].options["prefix_cache"] = 0
    GRPOTrainer(run, dict(run.config.plugins["grpo"], steps=2, **opts)).train()
    run.store.add_train_steps(run.id, [{"step": 3, "reward_mean": -1}])  # a step the killed run never saved
    run.close()
    again = Run(run.config, run.store, run.repo, run_id=run.id, resumed=True)
    summary = GRPOTrainer(again, dict(again.config.plugins["grpo"], steps=4, **opts)).train(resume=True)
    assert summary["resumed_from"] == 2
    steps = [r[0] for r in again.store.query("SELECT step FROM train_steps WHERE run_id = ? ORDER BY step", [run.id])[1]]
    assert steps == [1, 2, 3, 4]
    got = final_weights(again)
    assert all(torch.allclose(got[k], want[k], atol=1e-6) for k in want)
    again.close()


def test_an_update_is_the_same_with_shared_prefixes(tmp_path, tiny_dir):
    from evolver_training import Optimiser

    run = make_run(tmp_path, tiny_dir, group_size=4, tasks_per_step=2, beta=0.1, micro_batch=3)
    trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"]))
    trainer.setup()
    episodes, groups = trainer.rollout(0, trainer.tasks[:2])
    _, samples = trainer._collect(episodes, groups)
    for k, s in enumerate(samples):
        s.advantage = (-1.0) ** k * (1 + k / 10)
    start = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    after = {}
    for share in (0, 8):
        trainer.model.load_state_dict(start)
        # plain SGD: Adam's first step is ~lr * sign(grad), which float rounding flips where grad ~ 0
        trainer.opt = Optimiser([p for p in trainer.model.parameters() if p.requires_grad], lr=1.0,
                                max_grad_norm=trainer.cfg.max_grad_norm, algorithm=torch.optim.SGD)
        trainer.cfg.share_prefix = share
        out = trainer._update(list(samples))
        after[share] = (out["loss"], {k: v.clone() for k, v in trainer.model.state_dict().items()})
    assert after[8][0] == pytest.approx(after[0][0], rel=1e-4)
    moved = 0.0
    for name, w in after[0][1].items():
        step0, step8 = w - start[name], after[8][1][name] - start[name]
        assert (step8 - step0).norm() <= 1e-4 * step0.norm() + 1e-7, name
        moved = max(moved, float(step0.abs().max()))
    assert moved > 1e-3  # the update did something
    run.close()
