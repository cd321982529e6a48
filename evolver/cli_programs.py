"""``evolver programs log|diff|show`` (whole programs) and ``evolver skills history`` (one skill across them).

``evolver skills log|diff|show`` were the first names of the program commands; they stay as hidden aliases
so scripts keep working, and say where the commands went.
"""
from __future__ import annotations

from pathlib import Path

import click

from evolver.errors import EvolverError
from evolver.report import text_table


def _repo(obj):
    from evolver.programs import ProgramRepo

    return ProgramRepo(Path(obj.config().store))


@click.group()
def programs():
    """Inspect programs: lineage, diffs, contents."""


@programs.command(name="log")
@click.pass_obj
def programs_log(obj):
    """Every program with its parent, operator and scores (lineage)."""
    rows = [[r["id"], r.get("parent") or "", r.get("operator") or "", _fmt_scores(r.get("scores") or {}),
             " ".join(r.get("tags") or []), (r.get("message") or "")[:50]] for r in _repo(obj).log()]
    click.echo(text_table(["program", "parent", "operator", "scores", "tags", "message"], rows))


@programs.command(name="diff")
@click.argument("a")
@click.argument("b")
@click.pass_obj
def programs_diff(obj, a, b):
    """Unified diff between two programs (ids, tags or commits)."""
    click.echo(_repo(obj).diff(a, b))


@programs.command(name="show")
@click.argument("ref")
@click.pass_obj
def programs_show(obj, ref):
    """A program's manifest, prompt and skills."""
    click.echo(_repo(obj).show(ref))


@click.group()
def skills():
    """One skill across programs (whole programs: `evolver programs`)."""


@skills.command(name="history")
@click.argument("name")
@click.pass_obj
def skills_history(obj, name):
    """The versions of skill NAME: every program that changed it, oldest first."""
    repo = _repo(obj)
    rows = repo.skill_history(name)
    if not rows:
        known = repo.skill_names()
        raise EvolverError(f"no program has a skill {name!r}; skills in {repo.path}: "
                           f"{', '.join(known) if known else '(none)'}")
    click.echo(text_table(["program", "date", "operator", "version", "message"], [
        [r["id"], r["date"][:16].replace("T", " "), r["operator"] or "",
         "deleted" if r["deleted"] else r["version"] or "-", r["message"][:60]] for r in rows]))


def _alias(command: click.Command) -> click.Command:
    """``evolver skills NAME``: hidden, runs ``evolver programs NAME`` after one line on stderr."""
    @click.pass_context
    def forward(ctx, **kwargs):
        click.echo(f"`evolver skills {command.name}` is now `evolver programs {command.name}`; "
                   "use that (this alias will go)", err=True)
        ctx.invoke(command, **kwargs)
    return click.Command(command.name, callback=forward, params=command.params, help=command.help, hidden=True)


for _command in (programs_log, programs_diff, programs_show):
    skills.add_command(_alias(_command))


def _fmt_scores(scores: dict) -> str:
    return " ".join(f"{k}={v:.3f}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in sorted(scores.items())
                    if k.endswith("score") or k.endswith("context_tokens"))
