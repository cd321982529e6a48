"""Advantage estimators, KL estimators and loss aggregations against values computed by hand."""
import math

import numpy as np
import pytest
import torch

from evolver.errors import ConfigError, EvolverError
from evolver_grpo import advantages as A
from evolver_grpo.config import load
from evolver_grpo.objective import kl, policy_loss, token_weights

S3 = math.sqrt(3)


def trajs(rewards, group="g", states=None):
    return [A.Trajectory(group=group, rewards=r if isinstance(r, dict) else {"score": r},
                         states=(states[i] if states else ["s"])) for i, r in enumerate(rewards)]


def flat(advs):
    return [float(a[0]) for a in advs]


def test_grpo_uses_sample_std_and_zero_variance_gives_zero_not_nan():
    # rewards 1,0,0,1: mean 0.5, sample std sqrt(1/3) -> ±0.5*sqrt(3)
    assert flat(A.estimate("grpo", trajs([1, 0, 0, 1]))) == pytest.approx([S3 / 2, -S3 / 2, -S3 / 2, S3 / 2])
    same = A.estimate("grpo", trajs([0.3, 0.3, 0.3]) + trajs([1, 0], group="h"))
    assert flat(same)[:3] == [0.0, 0.0, 0.0] and not np.isnan(flat(same)).any()
    assert A.zero_variance(trajs([0.3, 0.3]) + trajs([1, 0], group="h")) == ["g"]
    # groups are normalised separately; Dr.GRPO's unscaled variant only centres
    assert flat(A.estimate("grpo", trajs([2, 0]), A.AdvantageConfig(scale=False))) == [1.0, -1.0]
    # the std floor bounds the advantage of a near-constant group
    floored = A.estimate("grpo", trajs([0.0, 1e-6]), A.AdvantageConfig(std_floor=0.1))
    assert flat(floored) == pytest.approx([-5e-6, 5e-6])


def test_rloo_leave_one_out():
    # r = 1, 0, 0: baselines 0, 0.5, 0.5
    assert flat(A.estimate("rloo", trajs([1, 0, 0]))) == pytest.approx([1.0, -0.5, -0.5])
    assert flat(A.estimate("rloo", trajs([1]))) == [0.0]


def test_gdpo_normalises_each_reward_then_the_batch():
    t = trajs([{"a": 1, "b": 0}, {"a": 0, "b": 0}, {"a": 0, "b": 1}, {"a": 1, "b": 1}])
    # per reward, ±sqrt(3)/2; sums: [0, -sqrt3, 0, sqrt3]; batch: mean 0, population std sqrt(3/2)
    expect = np.array([0, -S3, 0, S3]) / math.sqrt(1.5)
    assert flat(A.estimate("gdpo", t)) == pytest.approx(list(expect), abs=1e-6)


def test_gd2po_hard_and_snr_filtering_with_query_weight():
    t = trajs([{"a": 1, "b": 0}, {"a": 0, "b": 0}, {"a": 0, "b": 1}, {"a": 1, "b": 1}])
    # per-reward advantages: r0 (+,-) conflict, r1 (-,-), r2 (-,+) conflict, r3 (+,+)
    h = S3 / 2
    hard = flat(A.estimate("gd2po", t))
    assert hard == pytest.approx([0, -2 * h * 0.5, 0, 2 * h * 0.5])  # 2 of 4 kept: q = 0.5
    # SNR: a conflict sums to 0 (δ = 0); agreeing rollouts δ = 1; same survivors here
    snr = flat(A.estimate("gd2po", t, A.AdvantageConfig(gd2po_mode="snr", gd2po_tau=0.8)))
    assert snr == pytest.approx(hard)
    with pytest.raises(EvolverError):
        A.estimate("gd2po", t, A.AdvantageConfig(gd2po_mode="bogus"))


def test_dvao_weights_rewards_by_their_group_std():
    # reward a spreads (1,0,1,0), reward b is nearly saturated (1,1,1,0)
    t = trajs([{"a": 1, "b": 1}, {"a": 0, "b": 1}, {"a": 1, "b": 1}, {"a": 0, "b": 0}])
    sa, sb = np.std([1, 0, 1, 0], ddof=1), np.std([1, 1, 1, 0], ddof=1)
    aa = (np.array([1, 0, 1, 0]) - 0.5) / sa
    ab = (np.array([1, 1, 1, 0]) - 0.75) / sb
    expect = (sa * aa + sb * ab) / (sa + sb)
    assert flat(A.estimate("dvao", t)) == pytest.approx(list(expect))


def test_gigpo_adds_step_advantage_from_identical_states():
    # two 2-step trajectories sharing the start state s0; then s1 vs s2 (each seen once)
    t = trajs([1.0, 0.0], states=[["s0", "s1"], ["s0", "s2"]])
    cfg = A.AdvantageConfig(gigpo_omega=0.5, gigpo_gamma=0.9)
    out = A.estimate("gigpo", t, cfg)
    a_ep = 1 / math.sqrt(2)  # rewards 1, 0: sample std sqrt(1/2)
    # state s0 (step 1 of 2): returns 0.9*1 and 0.9*0 -> normalised ±1/sqrt(2)
    assert list(out[0]) == pytest.approx([a_ep + 0.5 * a_ep, a_ep])
    assert list(out[1]) == pytest.approx([-a_ep - 0.5 * a_ep, -a_ep])


def test_taco_shrinks_only_positive_advantage_on_surprising_tokens():
    old_logp = torch.tensor([math.log(0.9), math.log(0.001), math.log(0.001)])
    entropy = torch.tensor([0.1, 0.1, 0.1])
    adv = torch.tensor([1.0, 1.0, -1.0])
    out = A.taco_token_weights(old_logp, entropy, adv, alpha=0.1, lam=0.5)
    r = -math.log(0.001) - 0.1 + math.log(0.1)
    assert out[0] == pytest.approx(1.0)  # likely token: untouched
    assert out[1] == pytest.approx(1 - 0.5 * (1 - math.exp(-r)))  # tail token, positive: shrunk
    assert out[2] == pytest.approx(-1.0)  # negative advantage: never shrunk


def test_unknown_estimator_is_named():
    with pytest.raises(EvolverError, match="known: .*grpo"):
        A.estimate("nope", trajs([1, 0]))


def test_kl_estimators_closed_form():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    d = math.log(0.25 / 0.5)  # log π_ref/π_θ
    assert float(kl(logp, ref, "k1")) == pytest.approx(-d)
    assert float(kl(logp, ref, "k2")) == pytest.approx(0.5 * d * d)
    assert float(kl(logp, ref, "k3")) == pytest.approx(math.exp(d) - d - 1)
    # clamped: a huge log-ratio stays finite
    assert torch.isfinite(kl(torch.tensor([0.0]), torch.tensor([500.0]), "k3")).all()
    assert float(kl(logp, logp, "k3")) == 0.0


def test_aggregations_weight_tokens_as_documented():
    lengths = [1, 3]
    seq, tok, const = (token_weights(lengths, m, 4) for m in ("sequence", "token", "constant"))
    assert seq.tolist() == pytest.approx([1 / 2, 1 / 6, 1 / 6, 1 / 6])
    assert tok.tolist() == pytest.approx([1 / 4] * 4)
    assert const.tolist() == pytest.approx([1 / 8] * 4)
    with pytest.raises(EvolverError):
        token_weights(lengths, "mean")


def test_policy_loss_clips_and_first_ratio_is_one():
    logp = torch.tensor([0.0, 0.0, 0.0], requires_grad=True)
    w = torch.full((3,), 1 / 3)
    adv = torch.tensor([1.0, -1.0, 2.0])
    loss, st = policy_loss(logp, logp.detach(), adv, w)
    assert st["ratio_mean"] == 1.0 and st["clip_frac"] == 0.0
    assert float(loss.detach()) == pytest.approx(-(1 - 1 + 2) / 3)
    # ratio e^0.5 > 1.2 with positive advantage: clipped at 1.2 (no gradient through it)
    new = torch.tensor([0.5, 0.5, 0.5], requires_grad=True)
    loss, st = policy_loss(new, torch.zeros(3), adv, w)
    r = math.exp(0.5)
    assert float(loss.detach()) == pytest.approx(-(1.2 * 1 + (-r) + 1.2 * 2) / 3)
    assert st["clip_frac"] == pytest.approx(2 / 3)
    loss.backward()
    assert new.grad[0] == 0 and new.grad[2] == 0 and new.grad[1] != 0


def test_bad_options_say_what_is_known():
    with pytest.raises(ConfigError, match="plugins.grpo.group_sise"):
        load({"group_sise": 4})
    with pytest.raises(ConfigError, match="choose from"):
        load({"loss": "mean"})
    assert load({"estimator": "gigpo"}).estimator == "gigpo"


def test_blocked_steps_are_penalised_or_masked_and_the_rollout_kept():
    from evolver import Episode, Step, Task
    from evolver_grpo.samples import collect

    def episode(blocked):
        ep = Episode(task=Task(id="t", benchmark="b", split="train", category="c", prompt="p", gold="g"),
                     program_id="p", program_hash="h", model="m", seed=0, score=1.0)
        for i in range(2):
            step = Step(index=i, prompt="", output="", action="a", observation="o")
            step.sample = {"prompt_ids": [1, 2], "completion_ids": [3 + i], "logprobs": None, "state": f"s{i}"}
            step.monitor = {"rules": ["store"], "confirmed": True, "blocked": True} if blocked and i == 0 else None
            ep.steps.append(step)
        return ep

    eps, groups = [episode(True), episode(False)], ["g", "g"]
    trajs, samples = collect(eps, groups, monitor_flags="penalise", monitor_penalty=0.5)
    assert [t.rewards["score"] for t in trajs] == [0.5, 1.0] and len(samples) == 4
    trajs, samples = collect(eps, groups, monitor_flags="mask")
    assert [t.rewards["score"] for t in trajs] == [1.0, 1.0]
    assert [(s.traj, s.completion_ids) for s in samples] == [(0, [4]), (1, [3]), (1, [4])]
    assert trajs[0].states == ["s1"]  # the masked step leaves the trajectory's states too
    trajs, samples = collect(eps, groups, monitor_flags="keep")
    assert [t.rewards["score"] for t in trajs] == [1.0, 1.0] and len(samples) == 4
    with pytest.raises(ConfigError):
        load({"monitor_flags": "ignore"})
