"""Tree-GRPO: trees grown from replayed prefixes, exact prompts after the branching point, intra- plus
inter-tree advantages, branches trained only after their branching point, and learning the toy reward."""
import numpy as np
import pytest

from evolver import REPLAY_DIVERGED, Job, evaluate_many
from evolver_grpo import advantages as adv
from evolver_grpo.config import load
from evolver_grpo.samples import Member
from evolver_grpo.trainer import GRPOTrainer
from test_grpo_trainer import make_run


def test_tree_advantage_is_intra_plus_inter_by_hand():
    R = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]  # one task; tree 0 holds the first three, tree 1 the rest
    trajs = [adv.Trajectory(group="g", rewards={"score": r}, states=["s"], tree=str(i // 3)) for i, r in enumerate(R)]
    got = np.array([a[0] for a in adv.estimate("tree", trajs)])
    r = np.array(R)
    inter = (r - r.mean()) / r.std(ddof=1)
    t0, t1 = r[:3], r[3:]
    intra = np.concatenate([(t0 - t0.mean()) / t0.std(ddof=1), (t1 - t1.mean()) / t1.std(ddof=1)])
    assert np.allclose(got, inter + intra)
    # a tree whose trajectories all scored alike adds nothing of its own
    same = [adv.Trajectory(group="g", rewards={"score": v}, tree=t) for v, t in [(1, "a"), (1, "a"), (0, "b"), (0, "b")]]
    a = [x[0] for x in adv.estimate("tree", same)]
    assert a[0] == a[1] > 0 > a[2] == a[3]
    assert np.allclose(a, [x[0] for x in adv.estimate("grpo", same)])


def test_tree_sampling_picks_the_tree_estimator_unless_told():
    assert load({"sampling": "tree"}).estimator == "tree"
    assert load({"sampling": "tree", "estimator": "grpo"}).estimator == "grpo"
    assert load({}).estimator == "grpo"
    with pytest.raises(Exception, match="tree_nodes"):
        load({"sampling": "tree", "tree_nodes": 0})


def test_trees_branch_from_replayed_prefixes_with_exact_prompts(tmp_path, tiny_dir):
    M, N, L = 2, 2, 1
    run = make_run(tmp_path, tiny_dir, steps=4, sampling="tree", group_size=M, tree_nodes=N, tree_rounds=L,
                   temperature=1.0)
    trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"]))
    trainer.setup()
    tasks = trainer.tasks[:2]
    episodes, groups = trainer.rollout(0, tasks)
    assert len(episodes) == len(tasks) * M * (L * N + 1)  # G = M(LN+1): 4 calls an episode, 3 non-leaf
    assert trainer.tree_stats == {"branches": len(tasks) * M * L * N, "replay_diverged": 0}
    assert all(isinstance(g, Member) for g in groups) and len({(str(g), g.tree) for g in groups}) == len(tasks) * M
    backbones = [e for e in episodes if not any(s.sample.get("replayed") for s in e.steps)]
    assert len(backbones) == len(tasks) * M
    n_branch = 0
    for ep, g in zip(episodes, groups):
        replayed = [s for s in ep.steps if s.sample.get("replayed")]
        if not replayed:
            continue
        n_branch += 1
        k = len(replayed)  # the branch continues after its k-th call
        assert [s.sample["replayed"] for s in ep.steps] == [True] * k + [False] * (len(ep.steps) - k)
        parent = next(p for p, pg in zip(episodes, groups) if p is not ep and pg.tree == g.tree and str(pg) == str(g)
                      and [s.action for s in p.steps[:k]] == [s.action for s in ep.steps[:k]]
                      and [s.sample["completion_ids"] for s in p.steps[:k]]
                      == [s.sample["completion_ids"] for s in ep.steps[:k]])
        for a, b in zip(parent.steps[:k], ep.steps[:k]):  # the prefix is the parent's, call for call
            assert (a.prompt, a.output, a.action, a.observation) == (b.prompt, b.output, b.action, b.observation)
            assert a.sample["prompt_ids"] == b.sample["prompt_ids"]
        # after the branching point the model was asked exactly what the parent's next call was asked
        assert ep.steps[k].prompt == parent.steps[k].prompt
        assert ep.steps[k].sample["prompt_ids"] == parent.steps[k].sample["prompt_ids"]
        # and its prompt ids are exactly the chat template's for the stored prompt
        backend = run.backend("executor")
        import json

        from evolver.types import Message
        msgs = [Message(**m) for m in json.loads(ep.steps[k].prompt)]
        assert ep.steps[k].sample["prompt_ids"] == backend.chat_ids(msgs)
    assert n_branch == len(tasks) * M * L * N
    # a branch trains only what it sampled: the replayed calls are its parent's samples
    trajs, samples = trainer._collect(episodes, groups)
    n_calls = sum(1 for e in episodes for s in e.steps if not s.sample.get("replayed"))
    assert len(samples) == n_calls and all(t.tree for t in trajs)
    run.close()


def test_a_replay_that_diverges_fails_the_branch_with_a_clear_error(tmp_path, tiny_dir):
    run = make_run(tmp_path, tiny_dir, steps=3)
    trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"], group_size=1))
    trainer.setup()
    task = trainer.tasks[0]
    ep = trainer.rollout(0, [task])[0][0]
    forged = [s for s in ep.steps[:2]]
    forged[1] = type(forged[1])(**{**forged[1].__dict__, "prompt": forged[1].prompt.replace("Round", "Turn")})
    played = evaluate_many([Job(trainer.ctx, [task], seed=5, replay=[forged])], run.benchmark, trainer.sampler,
                           use_cache=False)[0][0]
    assert played.error and REPLAY_DIVERGED in played.error and played.score == 0.0
    assert len(played.steps) == 1  # the first call replayed; it stopped where the prompts parted
    run.close()


@pytest.mark.slow
def test_tree_grpo_learns_the_toy_reward(tmp_path, tiny_dir):
    """G = 6 a task as in the GRPO test: 2 trees, each grown by 2 rounds of 1 branch (three calls an
    episode, so a tree always has a non-leaf call left to branch). The tiny model rarely writes an 'a'
    over several turns, so the reward that moves is the total (score and length)."""
    run = make_run(tmp_path, tiny_dir, steps=3, categories=["a"], sampling="tree", group_size=2, tree_nodes=1,
                   tree_rounds=2, tasks_per_step=2)
    trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"], steps=16, lr=3e-3, beta=0.0, loss="token"))
    trainer.train()
    rewards = [row["reward_mean"] for row in trainer.history]
    print("reward per step:", " ".join(f"{r:.2f}" for r in rewards))
    assert all(row["branches"] == 8 and row["replay_diverged"] == 0 for row in trainer.history)
    assert np.mean(rewards[-4:]) > np.mean(rewards[:4]) + 0.05, rewards
    run.close()
