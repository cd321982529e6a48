"""SKILLRL's cold-start SFT (``evolver train --sft``): teach the policy to act with skills in its prompt.

It is the training layer's SFT (:class:`evolver_training.SFTTrainer`: demonstrated steps rendered by
the program's harness, cross-entropy on their actions, a checkpoint committed as a child program) on a
program that holds a skill bank: when it has none (and ``seed_bank``), one seeded from gold
trajectories of training tasks is committed first, so the prompts hold skills.
"""
from __future__ import annotations

from evolver import Demos
from evolver_skillrl.bank import commit_bank, load_bank
from evolver_skillrl.options import SkillSFTOptions, load_options
from evolver_training import SFTTrainer, commit_write_choice


class SkillSFTTrainer(SFTTrainer):
    """Cold-start SFT on skill-conditioned steps; options ``[plugins.sft]`` (:class:`SkillSFTOptions`)."""

    options_model = SkillSFTOptions

    def __init__(self, run, options: dict | None = None, engine=None, progress=None, episodes=None):
        super().__init__(run, options, engine=engine, progress=progress, episodes=episodes)
        self.bank_options = load_options(run.config)

    def prepare_program(self):
        """The program whose harness and bank condition the prompts (seeding a bank if asked)."""
        run, cfg = self.run, self.cfg
        program = run.repo.checkout(cfg.program)
        if cfg.seed_bank and not load_bank(program.root):
            from evolver_skillrl.proposer import seed_from_gold

            evo, gold = seed_from_gold(run, program, self.bank_options)
            if evo.entries:
                program = commit_bank(run, program, evo.entries, f"seed the bank from {len(gold)} gold trajectories",
                                      operator="seed-bank", forbidden=sorted({e.task.id for e in gold}),
                                      sequences=[list(e.task.gold) for e in gold if Demos.has_gold(e.task)],
                                      inject=self.bank_options.top_k, detail={"stats": evo.stats})
        return commit_write_choice(run, program) if cfg.write_choice else program

    def describe(self) -> str:
        return "cold-start SFT"
