"""``evolver skillrl``: look at a program's SkillBank, or seed one from gold trajectories."""
from __future__ import annotations

import time

import click


@click.group(name="skillrl")
def skillrl_group():
    """SKILLRL: the skill bank of a program (tiers, growth) and seeding it from gold."""


@skillrl_group.command(name="bank")
@click.option("--program", "program_ref", default="best", show_default=True, help="Program id, tag or commit.")
@click.pass_obj
def bank_cmd(obj, program_ref):
    """List a program's bank by tier, and its lineage's growth."""
    from evolver import open_workspace, text_table
    from evolver_skillrl.bank import counts, load_bank, tier_of

    config = obj.config()
    _, repo = open_workspace(config)
    ref = program_ref if program_ref != "best" or "best" in repo.tags("") else "seed"
    program = repo.checkout(ref)
    bank = load_bank(program.root)
    rows = [[tier_of(s), s.meta.get("category") or "", s.name, s.meta.get("origin") or "", s.description[:60]]
            for s in sorted(bank, key=lambda s: (("general", "task", "lesson").index(tier_of(s)), s.name))]
    click.echo(f"program {program.id}: {counts(bank)}")
    if rows:
        click.echo(text_table(["tier", "category", "skill", "origin", "description"], rows))
    chain, manifest = [], repo.manifest(program.id)
    while manifest and manifest.get("bank") is not None:
        chain.append([manifest.get("id", ""), manifest.get("operator", ""), str(manifest["bank"])])
        manifest = repo.manifest(manifest["parent"]) if manifest.get("parent") else None
    if chain:
        click.echo("\ngrowth (newest first):\n" + text_table(["program", "operator", "bank"], chain))


@skillrl_group.command(name="seed")
@click.option("--program", "program_ref", default="seed", show_default=True, help="Program to seed a bank for.")
@click.pass_obj
def seed_cmd(obj, program_ref):
    """Seed a bank from gold trajectories of training tasks and commit it as a child program."""
    from evolver import Demos, EvolverError, open_run
    from evolver_skillrl.bank import commit_bank, load_bank
    from evolver_skillrl.options import load_options
    from evolver_skillrl.proposer import seed_from_gold

    config = obj.config()
    with open_run(config, "skillrl-seed-" + time.strftime("%Y%m%d-%H%M%S")) as run:
        program = run.repo.checkout(program_ref)
        if load_bank(program.root):
            raise EvolverError(f"program {program.id} already has a bank; evolve it with "
                               "`evolver run --proposer skillrl` or seed another program")
        opts = load_options(config)
        evo, gold = seed_from_gold(run, program, opts)
        if not evo.entries:
            raise EvolverError(f"no skill came out of {len(gold)} gold trajectories: {evo.stats}; does the "
                               "benchmark have gold paths (twx does)?")
        new = commit_bank(run, program, evo.entries, f"seed the bank from {len(gold)} gold trajectories",
                          operator="seed-bank", forbidden=sorted({e.task.id for e in gold}),
                          sequences=[list(e.task.gold) for e in gold if Demos.has_gold(e.task)], inject=opts.top_k,
                          detail={"stats": evo.stats})
        run.store.update_run(run.id, status="finished", summary={"program": new.id})
    click.echo(f"seeded program {new.id} from {program.id}: {new.manifest.get('bank')} "
               f"(evolver skillrl bank --program {new.id})")
