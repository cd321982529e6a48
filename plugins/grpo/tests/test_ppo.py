"""PPO with a learned critic: GAE by hand, the critic fitting known returns, and the trainer end to end
on the tiny model (single rollouts, group_size = 1), learning the toy reward as GRPO does."""
import numpy as np
import pytest
import torch

from evolver import ConfigError
from evolver_grpo.critic import Critic, completion_hidden
from evolver_grpo.gae import call_rewards, episode_gae, explained_variance, gae, whiten
from evolver_training.logprobs import split_model
from evolver_grpo.ppo import PPOTrainer, value_loss
from evolver_grpo.ppo_config import load

from test_grpo_trainer import make_run


# ----------------------------------------------------------------------------------- GAE
def test_gae_matches_a_hand_computed_example():
    # δ2 = 1 - .7 = .3; δ1 = .9·.7 - .6 = .03; δ0 = .9·.6 - .5 = .04; γλ = .72
    adv, ret = gae([0, 0, 1], [0.5, 0.6, 0.7], gamma=0.9, lam=0.8)
    assert adv == pytest.approx([0.04 + 0.72 * (0.03 + 0.72 * 0.3), 0.03 + 0.72 * 0.3, 0.3])
    assert ret == pytest.approx(adv + np.array([0.5, 0.6, 0.7]))
    # a value after the end bootstraps the last step
    adv, _ = gae([0.0], [0.2], gamma=0.5, lam=1.0, last_value=1.0)
    assert adv == pytest.approx([0.5 * 1.0 - 0.2])


def test_gae_limits_are_return_minus_value_and_td_error():
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=7), rng.normal(size=7)
    adv, ret = gae(r, v, gamma=1.0, lam=1.0)
    assert adv == pytest.approx(np.cumsum(r[::-1])[::-1] - v)  # Monte-Carlo return - value
    assert ret == pytest.approx(np.cumsum(r[::-1])[::-1])
    adv, _ = gae(r, v, gamma=0.9, lam=0.0)
    assert adv == pytest.approx(r + 0.9 * np.append(v[1:], 0.0) - v)  # one-step TD error


def test_an_episode_chains_its_calls_into_one_trajectory():
    values, rewards = [np.array([0.5, 0.6]), np.array([0.7])], [0.0, 1.0]
    parts = episode_gae(values, rewards, gamma=0.9, lam=0.8)
    adv, ret = gae([0, 0, 1], [0.5, 0.6, 0.7], gamma=0.9, lam=0.8)
    assert np.concatenate([a for a, _ in parts]) == pytest.approx(adv)
    assert np.concatenate([r for _, r in parts]) == pytest.approx(ret)
    # γ = λ = 1: every token's return is the reward still to come in the episode, across calls
    parts = episode_gae([np.array([0.1, 0.2]), np.array([0.3, 0.4])], [0.5, 1.0], gamma=1.0, lam=1.0)
    assert parts[0][1] == pytest.approx([1.5, 1.5]) and parts[1][1] == pytest.approx([1.0, 1.0])


def test_call_rewards_sum_to_the_episode_reward():
    assert call_rewards([0.2, 0.5], 0.9) == pytest.approx([0.2, 0.7])  # score steps, end-only rest last
    assert call_rewards([0.2, 0.5], 0.9, per_step=False) == pytest.approx([0.0, 0.9])
    assert sum(call_rewards([0.3, 0.6], 0.0)) == pytest.approx(0.0)  # a crashed episode scores 0
    assert call_rewards([], 1.0) == []


def test_value_loss_clips_around_the_rollout_values_and_helpers():
    v, old, ret, w = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), torch.tensor([0.0, 0.5]), torch.ones(2)
    plain, _ = value_loss(v, old, ret, w, None)
    assert float(plain) == pytest.approx(0.5 * (1.0 + 0.25))
    clipped, frac = value_loss(v, old, ret, w, 0.2)  # token 0 moved away past the clip: its larger error counts
    assert float(clipped) == pytest.approx(plain) and frac == 0.0
    clipped, frac = value_loss(torch.tensor([0.0, 0.5]), old, torch.tensor([0.0, 0.5]), w, 0.2)
    assert float(clipped) == pytest.approx(0.5 * 0.3 ** 2) and frac == 1.0
    assert explained_variance(np.array([1.0, 2.0]), np.array([1.0, 2.0])) == 1.0
    assert explained_variance(np.zeros(3), np.ones(3)) == 0.0  # constant returns: nothing to explain
    assert whiten(np.array([1.0, 3.0])) == pytest.approx([-1.0, 1.0])


# ----------------------------------------------------------------------------------- the critic
@pytest.mark.parametrize("kind", ["head", "model"])
def test_the_critic_fits_known_returns(tiny_dir, kind):
    """Fixed prompts whose completions earn known rewards: after value-only updates the critic's
    values explain the GAE returns (γ = λ = 1, so every token's return is its episode's reward)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    policy = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32).eval()
    critic = Critic.build(kind, policy)
    prompts = [[5 + i, 12 + 3 * i, 40, 41] for i in range(6)]
    completions = [[50, 51, 52]] * 6
    rewards = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    returns = np.concatenate([episode_gae([np.zeros(3)], [r], 1.0, 1.0)[0][1] for r in rewards])
    target = torch.tensor(returns, dtype=torch.float32)
    with torch.no_grad():  # a head reads the (here frozen) policy's features
        hidden = completion_hidden(split_model(policy)[0], prompts, completions)

    def values():
        return critic.values(hidden) if kind == "head" else critic.values(prompts=prompts, completions=completions)

    with torch.no_grad():
        assert explained_variance(values().numpy(), returns) == pytest.approx(0.0)  # a new critic says 0
    opt = torch.optim.Adam(critic.parameters(), lr=0.05 if kind == "head" else 3e-3)
    for _ in range(100 if kind == "head" else 40):
        opt.zero_grad()
        loss, _ = value_loss(values(), target, target, torch.full((len(target),), 1 / len(target)), None)
        loss.backward()
        opt.step()
    with torch.no_grad():
        ev = explained_variance(values().numpy(), returns)
    print(kind, "explained variance", ev)
    assert ev > 0.8, ev


# ----------------------------------------------------------------------------------- the trainer
def test_options_need_no_group_and_reject_incoherent_ones():
    cfg = load({"group_size": 1})
    assert cfg.group_size == 1 and cfg.critic == "head" and cfg.loss == "token"
    with pytest.raises(ConfigError, match="dynamic_sampling"):
        load({"dynamic_sampling": True})
    with pytest.raises(ConfigError, match="plugins.ppo.lam"):
        load({"lam": 1.5})
    with pytest.raises(ConfigError, match="critic_model"):
        load({"critic_model": "some/folder"})


def test_cli_trains_with_ppo(tmp_path, tiny_dir, monkeypatch):
    """`evolver train --ppo`: the trainer registered by the grpo plugin, its options under plugins.ppo,
    its progress columns (the critic's value loss and explained variance)."""
    from click.testing import CliRunner

    from evolver.cli import cli

    from letterbench import cli_args

    args = cli_args(tmp_path, tiny_dir, monkeypatch)
    r = CliRunner().invoke(cli, args + ["train", "--ppo", "--steps", "1", "--set=plugins.ppo.max_new_tokens=4",
                                        "--set=plugins.ppo.tasks_per_step=2"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "vloss " in r.output and "ev " in r.output and "committed as program" in r.output
    r = CliRunner().invoke(cli, args + ["train", "--trainer", "ppo", "--set=plugins.ppo.lam=2"])
    assert r.exit_code != 0 and "plugins.ppo.lam" in r.output


def test_a_separate_critic_model_trains_on_multi_turn_single_rollouts(tmp_path, tiny_dir):
    """Two-turn episodes, one rollout per task: every call is a sample; the critic model learns, the
    rows carry the critic's metrics."""
    run = make_run(tmp_path, tiny_dir, steps=2)
    trainer = PPOTrainer(run, dict(run.config.plugins["grpo"], steps=2, group_size=1, tasks_per_step=3,
                                   critic="model", lr=1e-3, critic_lr=1e-3))
    trainer.setup()
    before = {k: v.clone() for k, v in trainer.critic.state_dict().items()}
    row = trainer.step(0)
    assert row["episodes"] == 3 and row["samples"] == 6 and row["trained_samples"] == 6
    assert row["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert all(not torch.equal(before[k], v) for k, v in trainer.critic.state_dict().items() if k.startswith("value"))
    assert trainer.critic.trunk is not split_model(trainer.model)[0]
    for key in ("value_loss", "explained_variance", "value_mean", "return_mean", "reward_mean", "kl", "clip_frac"):
        assert key in row
    run.close()


def test_tool_call_rollouts_take_ppo_log_probs_under_their_grammar(tmp_path, tiny_dir):
    """A tool-calling task's calls are decoded under the tools' grammar: PPO's log-probs come from the same
    masks (the first ratio is exactly 1, and the masked log-probs are the engine's)."""
    run = make_run(tmp_path, tiny_dir, tools=True, max_new_tokens=80)
    trainer = PPOTrainer(run, dict(run.config.plugins["grpo"], steps=1, group_size=1, tasks_per_step=3, lr=1e-3,
                                   entropy_coef=0.01))  # an entropy bonus: its gradient through the mask stays finite
    trainer.setup()
    episodes, groups = trainer.rollout(0, trainer.tasks[:2])
    _, samples = trainer._collect(episodes, groups)
    assert samples and all(s.grammar for s in samples)
    lp, ent, _ = trainer._forward(samples, grad=False)
    rollout = torch.tensor([x for s in samples for x in s.rollout_logprobs])
    assert float((lp.cpu() - rollout).abs().max()) <= 1e-4 and torch.isfinite(ent).all()
    row = trainer.step(0)
    assert row["samples"] >= 1 and row["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    run.close()


def test_policy_learns_the_toy_reward_from_single_rollouts(tmp_path, tiny_dir):
    """15 steps of PPO on the tiny model, single rollouts (group_size 1; the two tasks come up six times
    a step, as in GRPO's learning test, but nothing groups them): the mean score of the last steps
    beats the first ones, and `train_steps` holds the critic's metrics. (With twelve distinct tasks a
    step the tiny model learns too slowly for this test, with or without a critic.)"""
    run = make_run(tmp_path, tiny_dir)
    trainer = PPOTrainer(run, dict(run.config.plugins["grpo"], steps=15, lr=5e-3, critic_lr=3e-3, group_size=1,
                                   tasks_per_step=12, per_category=1))
    trainer.train()
    rewards = [r["score_mean"] for r in trainer.history]
    print("score per step:", " ".join(f"{r:.2f}" for r in rewards))
    print("explained variance:", " ".join(f"{r['explained_variance']:.2f}" for r in trainer.history))
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + 0.05, rewards
    rows = run.store.query("SELECT metrics FROM train_steps WHERE run_id = ? ORDER BY step", [run.id])[1]
    assert len(rows) == 15
    import json

    metrics = [json.loads(m) if isinstance(m, str) else m for (m,) in rows]
    assert all("value_loss" in m and "explained_variance" in m for m in metrics)
    assert metrics[0]["value_mean"] == 0.0 and metrics[-1]["value_mean"] > 0.1  # a new critic, then a learnt one
    run.close()


def test_resume_restores_the_critic(tmp_path, tiny_dir):
    """2 steps, stop, resume to 3: the policy and the critic are those of 3 uninterrupted steps."""
    from evolver.run import Run

    opts = dict(group_size=1, tasks_per_step=2, lr=1e-2, critic_lr=1e-2, save_every=1)
    straight = make_run(tmp_path / "straight", tiny_dir)
    straight.config.roles["executor"].options["prefix_cache"] = 0  # bit-identical numerics on both paths
    first = PPOTrainer(straight, dict(straight.config.plugins["grpo"], steps=3, **opts))
    first.train()
    want_policy = {k: v.clone() for k, v in first.model.state_dict().items()}
    want_critic = {k: v.clone() for k, v in first.critic.state_dict().items()}
    straight.close()

    run = make_run(tmp_path / "resumed", tiny_dir)
    run.config.roles["executor"].options["prefix_cache"] = 0
    PPOTrainer(run, dict(run.config.plugins["grpo"], steps=2, **opts)).train()
    run.close()
    again = Run(run.config, run.store, run.repo, run_id=run.id, resumed=True)
    second = PPOTrainer(again, dict(again.config.plugins["grpo"], steps=3, **opts))
    assert second.train(resume=True)["resumed_from"] == 2
    got_policy, got_critic = second.model.state_dict(), second.critic.state_dict()
    assert all(torch.allclose(got_policy[k], want_policy[k], atol=1e-6) for k in want_policy)
    assert all(torch.allclose(got_critic[k], want_critic[k], atol=1e-6) for k in want_critic)
    assert any(v.abs().sum() > 0 for v in got_critic.values())  # the critic did learn
    again.close()
