"""``expert-iteration``: fine-tune the parent's policy on its own best sampled rollouts.

The parent plays ``tasks_per_category`` training tasks per category greedily, and ``samples`` more
times each at ``temperature`` (every sample its own seed, so reruns repeat); a parent that wins
little samples more widely (``wide_samples`` at ``wide_temperature``). Of each task's samples the
best one is kept when it won (``min_score``) or beat the parent's greedy score on that task by more
than ``min_gain``; one that did not win is cut after its last rewarded step. The policy is pushed
toward what it can already do on a good draw, and any parent can start it: partial credit is credit.
The parent's skills play along, so a mined skill's notes are in the prompts it learns from. Its steps
already hold the exact prompts the parent's harness rendered, so they are the SFT data as they are.
The demonstrations imitation uses are never mixed in here: what is learnt is the policy's own.
"""
from __future__ import annotations

import dataclasses

from pydantic import BaseModel, ConfigDict

from evolver_experience.train import describe, split_options, train_from


class ExpertIterationOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks_per_category: int = 4
    """Training tasks per category the parent samples on."""
    first_task: int = 8
    """Skip this many training tasks per category (the ones imitation's first rounds demonstrate)."""
    samples: int = 2
    """Sampled rollouts per task (beside the greedy one)."""
    temperature: float = 0.7
    """Sampling temperature of the rollouts."""
    min_score: float = 1.0
    """A rollout scoring at least this is kept (1.0: a won game)."""
    min_gain: float = 0.0
    """Or one beating the parent's greedy score on the same task by more than this."""
    min_trajectories: int = 2
    """Propose nothing when fewer rollouts are kept."""
    min_parent_score: float = 0.0
    """Skip a parent whose dev score is below this (no rollouts played). 0: any parent; one that wins
    little still earns partial credit on a good draw, and those steps are what it learns from."""
    wide_below: float = 0.25
    """When fewer than this share of the greedy rollouts win, sample more widely: ``wide_samples``
    rollouts a task at ``wide_temperature``."""
    wide_samples: int = 3
    wide_temperature: float = 1.0
    every: int = 1
    """Propose on every N-th iteration only."""


def credited(episode):
    """A rollout that did not win, cut after its last step that raised the score: the steps that earned
    its partial credit, not the wandering after them."""
    last = max((i for i, st in enumerate(episode.steps)
                if (st.reward or 0.0) > (episode.steps[i - 1].reward or 0.0 if i else 0.0) + 1e-9), default=None)
    if last is None:
        return episode
    return dataclasses.replace(episode, steps=episode.steps[:last + 1])


class ExpertIterationProposer:
    needs_failures = False  # learns from its own sampled rollouts
    drafts = 1  # one fine-tuned policy a call

    def __init__(self, run, **options):
        self.run = run
        self.cfg, self.sft = split_options(ExpertIterationOptions, options, "expert-iteration", {"lr": 5e-5})

    def rollouts(self, ctx, program=None) -> tuple[list, dict]:
        """The kept episodes (with their steps) and counts for the hypothesis. ``program``: what plays
        (default the parent), on the parent's weights."""
        from evolver import evaluate_many
        from evolver_training import RolloutBackend, demo_tasks

        run, cfg, parent = self.run, self.cfg, program or ctx.parent
        tasks = demo_tasks(run.benchmark, cfg.first_task, cfg.tasks_per_category)
        program_ctx = run.context(parent)
        backend = run.executor_for(parent)
        seed0 = run.config.loop.episode_seed
        run.status = f"iteration {ctx.iteration}: expert-iteration greedy rollouts"
        greedy = evaluate_many([(program_ctx, tasks)], run.benchmark, backend, seed=seed0, purpose="train",
                               store=run.store, run=run)[0]
        wide = sum(e.won for e in greedy) < cfg.wide_below * max(1, len(greedy))
        samples, temperature = (cfg.wide_samples, cfg.wide_temperature) if wide else (cfg.samples, cfg.temperature)
        sampler = RolloutBackend(backend, temperature, seed=seed0 * 7919 + ctx.iteration)
        jobs = [(program_ctx, tasks, seed0 + 1 + k + 100 * ctx.iteration) for k in range(samples)]
        run.status = f"iteration {ctx.iteration}: expert-iteration {samples} x {len(tasks)} sampled rollouts"
        # Not from the cache: a sampled episode needs its steps, and its seed is new anyway.
        sampled = evaluate_many(jobs, run.benchmark, sampler, purpose="train", store=run.store, run=run,
                                use_cache=False)
        kept = []
        for i, task in enumerate(tasks):
            best = max((eps[i] for eps in sampled), key=lambda e: e.score)
            if best.error or not best.steps:
                continue
            if best.score >= cfg.min_score or best.score > greedy[i].score + cfg.min_gain:
                kept.append(best if best.won else credited(best))
        stats = {"tasks": len(tasks), "samples": samples, "temperature": temperature, "kept": len(kept),
                 "greedy_score": sum(e.score for e in greedy) / max(1, len(greedy)),
                 "sampled_score": sum(e.score for eps in sampled for e in eps) / max(1, sum(map(len, sampled))),
                 "kept_score": sum(e.score for e in kept) / max(1, len(kept))}
        return kept, stats

    def propose(self, ctx) -> list:
        if ctx.iteration % max(1, self.cfg.every):
            return []
        score = ctx.parent_score()
        if score is not None and score < self.cfg.min_parent_score:
            self.run.log(f"expert-iteration: {ctx.parent.id}'s dev score {score:.3f} is below min_parent_score "
                         f"{self.cfg.min_parent_score}: no rollouts this time")
            return []
        kept, stats = self.rollouts(ctx)
        if len(kept) < self.cfg.min_trajectories:
            self.run.log(f"expert-iteration: {len(kept)} of {stats['tasks']} tasks had a rollout worth keeping "
                         f"(min_trajectories {self.cfg.min_trajectories}): no candidate")
            return []
        summary = train_from(self.run, ctx.parent, ctx.iteration, "expert-iteration", self.sft, episodes=kept)
        draft = ctx.new_draft(
            "expert-iteration",
            hypothesis=(f"fine-tune {ctx.parent.id}'s policy on its best of {stats['samples']} sampled rollouts "
                        f"(T={self.cfg.temperature}) on {stats['kept']} of {stats['tasks']} training tasks "
                        f"(kept mean {stats['kept_score']:.2f} vs greedy {stats['greedy_score']:.2f}): {describe(summary)}"),
            detail={k: summary[k] for k in ("train_run", "checkpoint", "losses", "samples", "trajectories", "from")}
            | {"rollouts": stats})
        draft.manifest["model"] = summary["checkpoint"]
        return [draft]
