"""``evolver run --proposer grpo``: the loop's step 8, training as one more way to propose a candidate.

Every ``propose_every`` iterations it fine-tunes the parent's policy with GRPO for ``steps`` steps,
the parent's skills and harness in every prompt (its own checkpoint as the starting point when the
parent was trained already), and proposes a candidate with the parent's files and a manifest whose
``model`` is the new checkpoint. The loop then treats it like any other candidate: checks, a smoke
episode, staged evaluation on dev with its own weights, the frontier. A trained program's descendants
inherit its weights, so skills evolved later are played by the policy they were evolved for.

Where the loop has a wall-time budget (``loop.max_wall_s``), training takes at most ``wall_share``
of what is left of it: it stops after the step past which the next would not fit, and proposes that
step's checkpoint. A parent below ``min_parent_score`` on dev is not trained on, and training in which
every group's rollouts scored alike (nothing to learn, even with ``dynamic_sampling``) proposes
nothing. It needs no failures: it samples its own groups.

Training runs in a run of its own (``<loop run>-grpo-it<N>``, so its steps are in ``train_steps``
and its rollouts in ``episodes``) with its own copy of the model: the loop's executor, which every
other program plays with, is never trained in place. Options are the trainer's, under
``[plugins.grpo]``.
"""
from __future__ import annotations

from evolver import Proposer
from evolver_grpo.config import load


class GRPOProposer(Proposer):
    needs_failures = False  # learns from its own sampled groups
    drafts = 1  # one trained policy a call

    def __init__(self, run, **options):
        self.run = run
        self.options = dict(options)
        self.cfg = load(self.options)  # fail at start-up on a bad option, not mid-run

    def propose(self, ctx) -> list:
        cfg, loop_run, parent = self.cfg, self.run, ctx.parent
        if ctx.iteration % max(1, cfg.propose_every):
            return []
        score = ctx.parent_score()
        if score is not None and score < cfg.min_parent_score:
            loop_run.log(f"grpo: {parent.id}'s dev score {score:.3f} is below min_parent_score "
                         f"{cfg.min_parent_score}: no training this time")
            return []
        # a seed of its own each iteration: a parent trained on again samples other tasks and rollouts
        options = {**self.options, "program": parent.id, "commit": False, "seed": cfg.seed + ctx.iteration}
        allowed = self.allowed_s()
        if allowed is not None:
            if allowed < cfg.min_wall_s:
                loop_run.log(f"grpo: {allowed:.0f}s of the search's wall-time share left (min_wall_s "
                             f"{cfg.min_wall_s:.0f}): no training this time")
                return []
            options["max_wall_s"] = min(allowed, cfg.max_wall_s or allowed)
        from evolver_grpo.trainer import GRPOTrainer

        start = loop_run.checkpoint_of(parent)
        train_id, summary = train_in_own_run(
            loop_run, ctx, "grpo", lambda run, opts, progress: GRPOTrainer(run, opts, progress=progress),
            options, lambda row: f"grpo step {row['step']}/{cfg.steps} reward {row['reward_mean']:.3f}", "reward_mean")
        history = summary["history"]
        if history and all(h["zero_var_frac"] >= 1.0 for h in history):
            loop_run.log(f"grpo: every group of {parent.id}'s rollouts scored alike in all {len(history)} steps "
                         "(nothing to learn): no candidate")
            return []
        rewards = [h["reward_mean"] for h in history]
        first, last = (rewards[0], rewards[-1]) if rewards else (0.0, 0.0)
        cut = f" (of {cfg.steps}: the wall-time share ran out)" if summary["steps"] < cfg.steps else ""
        draft = ctx.new_draft(
            "grpo", hypothesis=(f"GRPO ({cfg.estimator}{', dynamic sampling' if cfg.dynamic_sampling else ''}) "
                                f"for {summary['steps']} steps{cut} on {parent.id}'s policy with its skills in "
                                f"the prompt: sampled training reward {first:.3f} -> {last:.3f}"),
            detail={"train_run": train_id, "checkpoint": summary["checkpoint"], "reward_mean": rewards,
                    "steps": summary["steps"], "from": start or "the configured executor model"})
        draft.manifest["model"] = summary["checkpoint"]
        return [draft]

    def allowed_s(self) -> float | None:
        """Seconds of training this iteration may take: ``wall_share`` of what is left of the loop's
        search time; None when the loop has no wall-time budget."""
        budget = self.run.config.loop.max_wall_s
        if not budget:
            return None
        return self.cfg.wall_share * max(0.0, budget - self.run.elapsed())


def train_in_own_run(loop_run, ctx, operator: str, make_trainer, options: dict, status, metric: str):
    """Train ``ctx.parent``'s policy in a run of its own (``<loop run>-<operator>-it<N>``, the parent's
    checkpoint as its executor), its status ``failed`` or ``finished`` with the steps, the checkpoint and
    ``metric`` per step; ``status(row)`` is the loop's progress line per step. Returns (run id, summary)."""
    train_id = f"{loop_run.id}-{operator}-it{ctx.iteration}"
    train_run = loop_run.training_run(ctx.parent, train_id)
    try:
        trainer = make_trainer(train_run, options, lambda row: setattr(
            loop_run, "status", f"iteration {ctx.iteration}: {status(row)}"))
        summary = trainer.train()
    except BaseException:
        loop_run.store.update_run(train_id, status="failed")
        raise
    finally:
        train_run.close()
    loop_run.store.update_run(train_id, status="finished", summary={
        "steps": summary["steps"], "checkpoint": summary["checkpoint"],
        metric: [h[metric] for h in summary["history"]]})
    return train_id, summary


def make_proposer(run, **options) -> GRPOProposer:
    return GRPOProposer(run, **options)
