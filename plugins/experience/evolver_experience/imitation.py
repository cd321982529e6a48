"""``imitation``: fine-tune the parent's policy on the benchmark's demonstrations of training tasks.

Each round down a lineage takes training tasks no earlier round used (the manifest of every imitation
candidate records its slice per category, ``demos``), so every round brings demonstrations the
parent has not been trained on; ``max_rounds`` stops it. With ``focus`` a round's
``per_category * categories`` demonstrations are shared out by how far the parent is from solving each
category on dev (``1 - score``, at least ``min_share``): a second round spends its time where the
policy still fails, and keeps a few of the rest against forgetting. A benchmark that offers no
demonstrations gets no candidate (logged), and the run goes on with its other proposers.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from evolver_experience.train import describe, lineage, split_options, train_from


# One pass at 1e-4 over a few demonstrations per twx-easy game is what fits the default run's 15
# minutes on 2 cores; at SFT's own 3e-5 it takes more data for as much, and a warm-up or a decaying
# schedule did not help (docs/measurements.md).
SFT_DEFAULTS = {"lr": 1e-4}


class ImitationOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    per_category: int = Field(3, ge=1)
    """Demonstrated training tasks per category in one round (on average, with ``focus``)."""
    max_rounds: int = 2
    """Imitation rounds down one lineage; a parent with this many imitation ancestors gets none."""
    focus: bool = True
    """Share a round's demonstrations out by the parent's per-category dev failures (1 - score)."""
    min_share: float = Field(0.25, ge=0.0)
    """With ``focus``: a category's weight is at least this (a solved one keeps some demonstrations)."""
    every: int = 1
    """Propose on every N-th iteration only."""


def allocate(total: int, weights: dict[str, float]) -> dict[str, int]:
    """``total`` split in proportion to ``weights`` (largest remainders; ties by name)."""
    mass = sum(weights.values()) or 1.0
    raw = {c: total * w / mass for c, w in weights.items()}
    out = {c: int(v) for c, v in raw.items()}
    for c in sorted(raw, key=lambda c: (-(raw[c] - out[c]), c))[:total - sum(out.values())]:
        out[c] += 1
    return out


def plan_demos(run, cfg: ImitationOptions, parent, ancestors: list[dict]) -> dict[str, list[int]]:
    """Per category: [first training task, count] of this round: tasks after the last one any ancestor
    was trained on (their manifests' ``demos``), shared out by ``cfg`` (``per_category``, ``focus``)."""
    used: dict[str, int] = {}
    for manifest in ancestors:
        for c, (first, n) in (manifest.get("demos") or {}).items():
            used[c] = max(used.get(c, 0), first + n)
    cats = list(run.benchmark.categories)
    weights = {c: 1.0 for c in cats}
    if cfg.focus:
        rows = run.store.evaluations(run.id, parent.id, "dev")
        scores = (rows[-1].get("per_category") or {}) if rows else {}
        weights = {c: max(cfg.min_share, 1.0 - float(scores.get(c, 0.0))) for c in cats}
    counts = allocate(cfg.per_category * len(cats), weights)
    return {c: [used.get(c, 0), counts[c]] for c in cats if counts[c]}


def planned_tasks(run, plan: dict[str, list[int]]) -> list:
    """The training tasks a plan names."""
    upto = max(first + n for first, n in plan.values())
    by_cat: dict[str, list] = {}
    for t in run.benchmark.tasks("train", per_category=upto):
        by_cat.setdefault(t.category, []).append(t)
    return [t for c, (first, n) in plan.items() for t in by_cat.get(c, [])[first:first + n]]


class ImitationProposer:
    needs_failures = False  # learns from demonstrations
    drafts = 1  # one fine-tuned policy a call

    def __init__(self, run, **options):
        self.run = run
        self.cfg, self.sft = split_options(ImitationOptions, options, "imitation", SFT_DEFAULTS)

    def plan(self, parent, ancestors: list[dict]) -> dict[str, list[int]]:
        return plan_demos(self.run, self.cfg, parent, ancestors)

    def propose(self, ctx) -> list:
        if ctx.iteration % max(1, self.cfg.every):
            return []
        run, parent = self.run, ctx.parent
        ancestors = lineage(run, parent.id)
        rounds = sum(m.get("operator") == "imitation" for m in ancestors)
        if rounds >= self.cfg.max_rounds:
            run.log(f"imitation: {parent.id} has had {rounds} rounds (max_rounds {self.cfg.max_rounds})")
            return []
        from evolver import Demos

        plan = self.plan(parent, ancestors)
        tasks = planned_tasks(run, plan)
        run.status = f"iteration {ctx.iteration}: imitation replays {len(tasks)} demonstrations"
        episodes = [e for e in Demos.replay_gold(run, parent, tasks) if e.won and not e.error]
        if not episodes:
            run.log(f"imitation: benchmark {run.config.benchmark!r} offers no demonstrations of these training tasks")
            return []
        summary = train_from(run, parent, ctx.iteration, "imitation", self.sft, episodes=episodes)
        shares = ", ".join(f"{c} {n}" for c, (_, n) in plan.items())
        draft = ctx.new_draft(
            "imitation", hypothesis=(f"imitate {len(episodes)} demonstrations of new training tasks ({shares}; round "
                                     f"{rounds + 1}) from {parent.id}'s policy: {describe(summary)}"),
            detail={k: summary[k] for k in ("train_run", "checkpoint", "losses", "samples", "trajectories", "from")}
            | {"round": rounds + 1, "demos": plan})
        draft.manifest["model"] = summary["checkpoint"]
        draft.manifest["demos"] = plan
        return [draft]
