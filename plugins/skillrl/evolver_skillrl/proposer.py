"""``evolver run --proposer skillrl``: the bank evolves inside the core loop, without training.

Each iteration builds one candidate from the parent:
- parent without a bank (and ``seed_from_gold``): the bank seeded from gold trajectories of training
  tasks, replayed through the parent's harness (operator ``seed-bank``);
- otherwise: the categories whose latest validation score of the parent is below the threshold get
  lessons from failed TRAINING trajectories (this iteration's rollouts and the parent's earlier
  training episodes in the store), deduplicated against the bank (operator ``evolve-bank``).
The loop then checks, evaluates and lets the frontier decide, so an evolution that makes validation
worse is not kept. Bank growth (general / task / lesson) is in each proposal's detail.
"""
from __future__ import annotations

from evolver import ROLES, ConfigError, Demos, Proposer, load_embedder
from evolver_skillrl.bank import counts, load_bank, write_entries
from evolver_skillrl.distill import Distiller
from evolver_skillrl.evolve import evolve, seed_entries
from evolver_skillrl.options import load_options


def make_distiller(run, options) -> Distiller:
    if options.teacher == "rules":
        return Distiller(None)
    if options.teacher not in ROLES:
        raise ConfigError(f"plugins.skillrl.teacher = {options.teacher!r}: name a role ({', '.join(ROLES)}) "
                          "whose backend distils, or \"rules\"")
    return Distiller(run.backend(options.teacher), options.teacher_max_tokens, options.repair, options.max_steps_shown)


def latest_dev(run, program_id: str) -> dict[str, float] | None:
    rows = run.store.evaluations(run.id, program_id=program_id, split="dev")
    return (rows[-1].get("per_category") or {}) if rows else None


def seed_from_gold(run, program, options, distiller=None):
    """(Evolution, gold episodes) for an empty bank; gold comes from the benchmark's training tasks."""
    tasks = run.benchmark.tasks("train", per_category=options.gold_per_category)
    gold = Demos.replay_gold(run, program, tasks)
    return seed_entries(gold, load_bank(program.root), distiller or make_distiller(run, options),
                        load_embedder(options.embedder, fallback=False), options), gold


class SkillRLProposer(Proposer):
    drafts = 1  # one update of the skill bank a call

    def __init__(self, run, **options):
        self.run = run
        self.options = load_options(dict(options))

    def propose(self, ctx) -> list:
        opts, run, parent = self.options, self.run, ctx.parent
        bank = load_bank(parent.root)
        if not bank and opts.seed_from_gold:
            evo, used = seed_from_gold(run, parent, opts)
            operator, why = "seed-bank", f"seed the skill bank from {len(used)} gold training trajectories"
        else:
            per_category = latest_dev(run, parent.id)
            if per_category is None:  # never validated in this run: every category counts as weak
                per_category = {c: 0.0 for c in getattr(run.benchmark, "categories", [])}
            stored = run.store.episodes(run_id=run.id, program_id=parent.id, purpose="train", split="train",
                                        with_steps=True)
            by_id = {e.id: e for e in stored}
            by_id.update({e.id: e for e in ctx.failures})
            evo = evolve(per_category, list(by_id.values()), bank, make_distiller(run, opts),
                         load_embedder(opts.embedder, fallback=False), opts, run.config.loop.failure_threshold)
            used = evo.used
            operator, why = "evolve-bank", (f"lessons for weak categories {', '.join(evo.weak) or '(none)'} from "
                                            f"{len(used)} failed training trajectories")
        if not evo.entries:
            return []  # nothing new survived the schema, dedup and caps: no candidate this iteration
        detail = {"bank_before": counts(bank), "stats": evo.stats, "dropped": evo.dropped[:10],
                  "added": [e.name for e in evo.entries]}
        draft = ctx.new_draft(operator, why, detail=detail)
        names = write_entries(draft.path, evo.entries, inject=opts.top_k)
        detail["bank_after"] = counts(load_bank(draft.path))
        detail["added"] = names
        draft.forbidden = sorted({e.task.id for e in used})
        draft.forbidden_sequences = [list(map(str, e.task.gold)) for e in used if isinstance(e.task.gold, list)]
        return [draft]


def make_proposer(run, **options) -> SkillRLProposer:
    return SkillRLProposer(run, **options)
