"""Tree-GRPO sampling (``sampling = "tree"``): rollouts that share their beginnings, so one task's
group holds more trajectories for the same tokens, and their differences sit after a common state.

Per task, ``group_size`` (M) trajectories are sampled as in GRPO: the backbones of M trees. Then
``tree_rounds`` (L) rounds: in each, every tree picks ``tree_nodes`` (N) of its non-leaf model calls
at random (the backbone's and those of the branches grown so far, each call at most once) and the
policy continues from the state right after that call. The continuation is a new episode whose first
calls are answered with the recorded replies (``Job.replay``): the environment replays the actions and
the harness passes through the same states, every replayed prompt is checked equal to the recorded
one, so the first sampled prompt is exactly the one the model would have seen there. A task's group
then holds G = M·(L·N + 1) trajectories when every tree has calls enough to branch (fewer otherwise:
a one-call episode has no non-leaf call, so on single-turn tasks this samples as GRPO does).

Each trajectory carries its tree (``samples.Member``); the ``tree`` estimator adds the advantage within
its tree to the one within the whole group, and a branch trains only the calls it sampled: the
replayed prefix is its parent's. An environment that does not replay its actions the same way makes
the replayed prompts differ: those branches fail with :data:`evolver.REPLAY_DIVERGED`, are counted
(``replay_diverged`` in ``train_steps``) and dropped.
"""
from __future__ import annotations

import random

from evolver import REPLAY_DIVERGED, Job, evaluate_many
from evolver_grpo.samples import Member


def grow(trainer, step: int, tasks: list, attempt: int = 0) -> tuple[list, list[Member]]:
    """The step's trees: (episodes, group ids naming each one's tree), backbones and branches."""
    cfg, run = trainer.cfg, trainer.run
    M, N, L = cfg.group_size, cfg.tree_nodes, cfg.tree_rounds
    base = (step * 1000 + attempt * 100) * M * (L * N + 1) + cfg.seed * 7919
    trainer.sampler.reseed(base)
    rng = random.Random(base)

    def play(jobs):
        live = cfg.rollout_batch or len(jobs) * max(len(j.tasks) for j in jobs)
        return evaluate_many(jobs, run.benchmark, trainer.sampler, store=run.store, run=run, purpose="grpo",
                             use_cache=False, max_live=live)

    backbones = play([Job(trainer.ctx, tasks, seed=base + m) for m in range(M)])
    trees = {(i, m): [backbones[m][i]] for i in range(len(tasks)) for m in range(M)}
    used: set[tuple[int, int]] = set()  # (id of an episode, call index) already branched
    seed = base + M
    branches = 0
    for _ in range(L):
        jobs, where = [], []
        for (i, m), members in trees.items():
            nodes = [(ep, k) for ep in members if not ep.error for k, st in enumerate(ep.steps[:-1])
                     if st.sample and not st.sample.get("replayed") and (id(ep), k) not in used]
            for ep, k in rng.sample(nodes, min(N, len(nodes))):
                used.add((id(ep), k))
                jobs.append(Job(trainer.ctx, [tasks[i]], seed=seed, replay=[ep.steps[:k + 1]]))
                where.append((i, m))
                seed += 1
        if not jobs:
            break
        for (i, m), played in zip(where, play(jobs)):
            trees[(i, m)].append(played[0])
        branches += len(jobs)
    episodes, group_of, diverged = [], [], 0
    for (i, m), members in trees.items():
        for ep in members:
            if ep.error and REPLAY_DIVERGED in ep.error:
                diverged += 1
                continue
            episodes.append(ep)
            group_of.append(Member(f"{step}:{attempt}:{tasks[i].id}", tree=str(m)))
    trainer.tree_stats = {"branches": branches, "replay_diverged": diverged}
    return episodes, group_of
