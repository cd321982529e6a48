"""``evolver run --proposer grpo``: the loop's step 8, training as one more way to propose a candidate.

Every ``propose_every`` iterations it fine-tunes the parent's policy with GRPO for ``steps`` steps,
the parent's skills and harness in every prompt (its own checkpoint as the starting point when the
parent was trained already), and proposes a candidate with the parent's files and a manifest whose
``model`` is the new checkpoint. The loop then treats it like any other candidate: checks, a smoke
episode, staged evaluation on dev with its own weights, the frontier. A trained program's descendants
inherit its weights, so skills evolved later are played by the policy they were evolved for.

Training runs in a run of its own (``<loop run>-grpo-it<N>``, so its steps are in ``train_steps``
and its rollouts in ``episodes``) with its own copy of the model: the loop's executor, which every
other program plays with, is never trained in place. Options are the trainer's, under
``[plugins.grpo]``.
"""
from __future__ import annotations

from evolver import Proposer
from evolver_grpo.config import load


class GRPOProposer(Proposer):
    def __init__(self, run, **options):
        self.run = run
        self.options = dict(options)
        self.cfg = load(self.options)  # fail at start-up on a bad option, not mid-run

    def propose(self, ctx) -> list:
        if ctx.iteration % max(1, self.cfg.propose_every):
            return []
        from evolver_grpo.trainer import GRPOTrainer

        loop_run, parent = self.run, ctx.parent
        start = loop_run.checkpoint_of(parent)
        train_id, summary = train_in_own_run(
            loop_run, ctx, "grpo", lambda run, opts, progress: GRPOTrainer(run, opts, progress=progress),
            {**self.options, "program": parent.id, "commit": False},
            lambda row: f"grpo step {row['step']}/{self.cfg.steps} reward {row['reward_mean']:.3f}", "reward_mean")
        rewards = [h["reward_mean"] for h in summary["history"]]
        first, last = (rewards[0], rewards[-1]) if rewards else (0.0, 0.0)
        draft = ctx.new_draft(
            "grpo", hypothesis=(f"GRPO ({self.cfg.estimator}) for {self.cfg.steps} steps on {parent.id}'s policy "
                                f"with its skills in the prompt: sampled training reward {first:.3f} -> {last:.3f}"),
            detail={"train_run": train_id, "checkpoint": summary["checkpoint"], "reward_mean": rewards,
                    "from": start or "the configured executor model"})
        draft.manifest["model"] = summary["checkpoint"]
        return [draft]


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
