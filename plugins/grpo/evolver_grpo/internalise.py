"""``evolver run --proposer internalise``: put a program's skills into its weights, and drop them.

Every ``every`` iterations it trains the parent's policy by on-policy self-distillation
(:mod:`evolver_grpo.distill`) with the parent's skills as the teacher's privileged context: the student
plays the parent without its skills, the teacher is the same model with them. It proposes the parent's
files *without* the skills folder and with a manifest whose ``model`` is the new checkpoint. The loop
checks and evaluates it like any candidate; at an equal score it dominates the parent on the frontier's
``context_tokens`` objective (its prompts no longer carry the skills), and a lower score says the
weights did not take them in.

Training runs in a run of its own (``<loop run>-internalise-it<N>``: its steps in ``train_steps``, its
rollouts in ``episodes``) with its own copy of the model, from the parent's checkpoint when it has one.
Options: the distill trainer's keys under ``[plugins.internalise]`` (``privileged`` is always
``skills``), plus ``every``.
"""
from __future__ import annotations

from typing import Literal

from evolver import Proposer
from evolver_grpo.distill_config import DistillConfig, load


class InternaliseConfig(DistillConfig):
    privileged: Literal["skills"] = "skills"
    every: int = 1
    """Propose on every N-th iteration only."""


class InternaliseProposer(Proposer):
    drafts = 1  # one distilled policy a call

    def __init__(self, run, **options):
        self.run = run
        self.options = dict(options)
        self.cfg = load(self.options, "internalise", InternaliseConfig)  # fail at start-up on a bad option

    def propose(self, ctx) -> list:
        if ctx.iteration % max(1, self.cfg.every):
            return []
        from evolver import Harnesses
        from evolver_grpo.distill import DistillTrainer, drop_skills
        from evolver_grpo.proposer import train_in_own_run

        loop_run, parent = self.run, ctx.parent
        skills = Harnesses.context(parent).skills
        if not skills:
            loop_run.log(f"internalise: {parent.id} has no skills to internalise")
            return []
        start = loop_run.checkpoint_of(parent)
        opts = {k: v for k, v in self.options.items() if k != "every"} | {"program": parent.id, "commit": False}
        train_id, summary = train_in_own_run(
            loop_run, ctx, "internalise", lambda run, o, progress: DistillTrainer(run, o, progress=progress), opts,
            lambda row: f"internalise step {row['step']}/{self.cfg.steps} divergence {row['divergence']:.4f}",
            "divergence")
        divs = [h["divergence"] for h in summary["history"]]
        saved = [h["privileged_tokens"] for h in summary["history"]]
        first, last = (divs[0], divs[-1]) if divs else (0.0, 0.0)
        names = ", ".join(s.name for s in skills)
        draft = ctx.new_draft(
            "internalise",
            hypothesis=(f"internalise {parent.id}'s {len(skills)} skill(s) ({names}) into its policy by "
                        f"self-distillation ({self.cfg.divergence}, {self.cfg.steps} steps; divergence to the "
                        f"with-skills teacher {first:.4f} -> {last:.4f}) and drop them from the context "
                        f"(~{(sum(saved) / len(saved)) if saved else 0:.0f} prompt tokens per call)"),
            detail={"train_run": train_id, "checkpoint": summary["checkpoint"], "divergence": divs,
                    "skills": [s.name for s in skills], "from": start or "the configured executor model"})
        drop_skills(draft.path)
        draft.manifest["model"] = summary["checkpoint"]
        return [draft]


def make_proposer(run, **options) -> InternaliseProposer:
    return InternaliseProposer(run, **options)
