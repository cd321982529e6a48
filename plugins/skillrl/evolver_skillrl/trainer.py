"""``evolver train --skillrl``: GRPO with the skill bank in every prompt, and recursive bank evolution.

The GRPO trainer plays each step's groups through ``self.ctx`` (the program's harness and bank); this
trainer only swaps ``self.ctx`` between steps, so every rollout of a group sees the same bank version
(``pins`` records the program hash of each group's rollouts). After each validation (``eval_every``):

1. if the bank evolved since the previous validation, it is kept when this validation is not worse
   (score >= previous - ``tolerance``), else the previous bank is restored;
2. every category scoring below ``category_threshold`` gets lessons distilled from this run's failed
   GRPO rollouts on TRAINING tasks (never validation episodes), deduplicated against the bank and
   committed as a new program; the next steps train with it.
Bank growth (general / task / lesson) is recorded per validation in ``train_steps`` (``event = "bank"``).

Options: GRPO's under ``[plugins.grpo]`` (or ``[plugins.skillrl]``, which override them), the bank's under
``[plugins.skillrl]``; ``eval_per_category`` must be set, since evolution is driven by validation.
"""
from __future__ import annotations

from evolver import ConfigError, Demos, EvolverError, load_embedder
from evolver_grpo import GRPOTrainer
from evolver_skillrl.bank import commit_bank, counts, load_bank
from evolver_skillrl.evolve import evolve
from evolver_skillrl.options import grpo_part, load_options


class SkillRLTrainer(GRPOTrainer):
    flag = True  # `evolver train --skillrl`; the progress columns are GRPO's

    def __init__(self, run, options: dict | None = None, engine=None, progress=None):
        raw = dict(options if options is not None else run.config.plugins.get("skillrl", {}))
        grpo = {**run.config.plugins.get("grpo", {}), **grpo_part(raw)}
        super().__init__(run, grpo, engine=engine, progress=progress)
        self.bank_options = load_options(raw)
        if not self.cfg.eval_per_category:
            raise ConfigError("evolver train --skillrl evolves the bank after each validation: set "
                              "plugins.grpo.eval_per_category (e.g. 2) and plugins.grpo.eval_every")
        self.pins: dict[str, set[str]] = {}
        self.growth: list[dict] = []
        self.pending: dict | None = None
        self.validations = 0
        self.evals: list[dict] = []
        self._resuming = False

    def setup(self) -> None:
        super().setup()
        opts = self.bank_options
        if self._resuming:
            return  # the bank in use comes from the saved state, never seeded twice
        if self.cfg.skills and opts.seed_from_gold and not load_bank(self.program.root):
            from evolver_skillrl.proposer import seed_from_gold

            evo, gold = seed_from_gold(self.run, self.program, opts)
            if evo.entries:
                self.use(commit_bank(self.run, self.program, evo.entries, f"seed the bank from {len(gold)} gold "
                                     "trajectories", operator="seed-bank", forbidden=sorted({e.task.id for e in gold}),
                                     sequences=[list(e.task.gold) for e in gold if Demos.has_gold(e.task)],
                                     inject=opts.top_k, detail={"stats": evo.stats}))

    def use(self, program) -> None:
        """Train with ``program``'s bank from the next step on (never inside a step: groups stay pinned)."""
        self.program = program
        self.ctx = self.run.context(program)

    def rollout(self, step: int, tasks: list, attempt: int = 0):
        episodes, group_of = super().rollout(step, tasks, attempt)
        for e, g in zip(episodes, group_of):
            self.pins.setdefault(g, set()).add(e.program_hash)
        return episodes, group_of

    # -------------------------------------------------------------------------- evolution
    def after_validation(self, step: int, ev) -> dict:
        opts, run = self.bank_options, self.run
        row = {"step": step, "event": "bank", "score": ev.score}
        if self.pending is not None:
            kept = ev.score >= self.pending["score"] - opts.tolerance
            row["kept"] = kept
            if not kept:
                self.use(self.pending["previous"])
            self.pending = None
        self.validations += 1
        bank = load_bank(self.program.root)
        if self.cfg.skills and opts.evolve_every and self.validations % opts.evolve_every == 0:
            from evolver_skillrl.proposer import make_distiller

            # the current bank's own rollouts: the failures it has not answered yet
            episodes = run.store.episodes(run_id=run.id, program_id=self.program.id, purpose="grpo", split="train",
                                          with_steps=True)
            evo = evolve(ev.per_category, episodes, bank, make_distiller(run, opts), load_embedder(opts.embedder, fallback=False), opts,
                         run.config.loop.failure_threshold)
            row["evolution"] = evo.stats
            if evo.entries:
                used = evo.used
                new = commit_bank(run, self.program, evo.entries,
                                  f"lessons for {', '.join(evo.weak)} after step {step}", operator="evolve-bank",
                                  forbidden=sorted({e.task.id for e in used}),
                                  sequences=[list(e.task.gold) for e in used if Demos.has_gold(e.task)],
                                  inject=opts.top_k, detail={"step": step})
                self.pending = {"previous": self.program, "score": ev.score}
                self.use(new)
        row.update(program=self.program.id, **counts(load_bank(self.program.root)))
        self.growth.append(row)
        run.add_train_steps([row])
        return row

    def resume_extra(self) -> dict:
        """What resuming needs beyond GRPO's state: the bank in use, an evolution awaiting its verdict,
        the validations so far and the bank's growth."""
        pending = self.pending and {"previous": self.pending["previous"].id, "score": self.pending["score"]}
        return {"program": self.program.id, "pending": pending, "validations": self.validations,
                "growth": self.growth, "evals": self.evals, "pins": {g: sorted(h) for g, h in self.pins.items()}}

    def train(self, resume: bool = False) -> dict:
        """``resume=True`` goes on from the newest checkpoint this run saved (``save_every``), with the
        bank, pending evolution and validations it had then."""
        from evolver_training import latest_state, save_and_commit

        found = latest_state(self.run.workspace, self.run.id) if resume else None
        if resume and found is None:
            raise EvolverError(f"run {self.run.id} saved no checkpoint to resume from (plugins.grpo.save_every="
                               f"{self.cfg.save_every}): start it again")
        self._resuming = found is not None
        self.setup()
        cfg, start = self.cfg, 0
        if found:
            start = self.resume_from(*found)
            extra, repo = found[1]["extra"], self.run.repo
            self.use(repo.checkout(extra["program"]))
            self.pending = extra["pending"] and {"previous": repo.checkout(extra["pending"]["previous"]),
                                                 "score": extra["pending"]["score"]}
            self.validations, self.growth, self.evals = extra["validations"], extra["growth"], extra["evals"]
            self.pins = {g: set(h) for g, h in extra["pins"].items()}
        else:
            self.evals = [{"step": 0, **self.evaluate().metrics()}]
        evals = self.evals
        program = None
        for step in range(start, cfg.steps):
            self.run.status = f"skillrl step {step + 1}/{cfg.steps}"
            self.step(step)
            last = step + 1 == cfg.steps
            if (cfg.eval_every and (step + 1) % cfg.eval_every == 0) or last:
                ev = self.evaluate()
                evals.append({"step": step + 1, **ev.metrics()})
                if not last:
                    self.after_validation(step + 1, ev)
            if last or (cfg.save_every and (step + 1) % cfg.save_every == 0):
                program = save_and_commit(self, step + 1, evals[-1])
        return {"steps": cfg.steps, "history": self.history, "evals": evals, "bank_growth": self.growth,
                "program": program.id if program else None, "checkpoint": program.model if program else None}
