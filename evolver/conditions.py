"""SkillsBench-style conditions: play one program with no skills, its evolved skills, skills the
model writes for itself in one shot (no feedback), or the benchmark's hand-written skill packs
(``pack``: labelled so, never a headline), and report the normalised gain
``g = (P_skill - P_none) / (1 - P_none)`` beside the absolute one."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from evolver import tempdirs
from evolver.evaluate import run_episodes, summarize
from evolver.programs import content_hash
from evolver.report import normalised_gain
from evolver.skills import pack_folders, write_skill
from evolver.types import Evaluation, GenRequest, Message, Program, Task

CONDITIONS = ("none", "evolved", "self", "pack")

SELF_PROMPT = ("You will solve tasks like the one below. Before you start, write a short skill for yourself: "
               "3 to 6 numbered steps that will help you solve tasks of this kind in general.\n\n"
               "Example task:\n{task}\n\nSteps:\n1.")


def variant(program: Program, condition: str, tasks: list[Task], writer=None,
            packs: dict | None = None) -> tuple[Program, Path | None]:
    """A copy of the program for one condition (a temp folder for none/self/pack), and that folder.
    ``packs``: the benchmark's ``skill_packs``, whose skills all stand in for the program's under ``pack``."""
    if condition == "evolved":
        return program, None
    tmp = Path(tempdirs.make(f"evolver-{condition}-"))
    shutil.copytree(program.root, tmp / "program", ignore=shutil.ignore_patterns(".git"))
    root = tmp / "program"
    shutil.rmtree(root / "skills", ignore_errors=True)
    (root / "skills").mkdir()
    if condition == "self":
        write_self_skills(root / "skills", tasks, writer)
    elif condition == "pack":
        folders = [f for fs in pack_folders(packs).values() for f in fs]
        if not folders:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ValueError("skills condition 'pack': this benchmark ships no hand-written skill pack")
        for folder in folders:
            shutil.copytree(folder, root / "skills" / folder.name, dirs_exist_ok=True)
    elif condition != "none":
        raise ValueError(f"unknown skills condition {condition!r}; choose from {', '.join(CONDITIONS)}")
    return Program(f"{program.id}+{condition}-skills", program.commit, str(root), content_hash(root),
                   dict(program.manifest)), tmp


def write_self_skills(skills_dir: Path, tasks: list[Task], writer) -> list[str]:
    """One skill per category, written by ``writer`` (a backend) from one example task, in one shot."""
    examples: dict[str, Task] = {}
    for t in tasks:
        examples.setdefault(t.category, t)
    cats = sorted(examples)
    requests = [GenRequest([Message("user", SELF_PROMPT.format(task=examples[c].prompt.strip()[:1200]))],
                           max_tokens=200) for c in cats]
    names = []
    for cat, result in zip(cats, writer.generate(requests)):
        body = "1. " + (result.text or "").strip()
        body = "\n".join(ln for ln in body.splitlines() if ln.strip())[:1500]
        if not re.search(r"\w", body[3:]):
            continue  # the model wrote nothing usable: no skill for this category
        name = re.sub(r"[^a-z0-9]+", "-", f"{cat}-self".lower()).strip("-")
        write_skill(skills_dir, name, f"Use when solving a {cat} task.", body, meta={"origin": "self-generated"})
        names.append(name)
    return names


def compare(run, program: Program, tasks: list[Task], conditions: list[str], progress=None,
            **kw) -> dict[str, Evaluation]:
    """Evaluate each condition on the same tasks; returns condition -> Evaluation (``.episodes`` set).
    ``progress(done, total)`` counts the episodes of all the conditions together."""
    out = {}
    for i, cond in enumerate(conditions):
        prog, tmp = variant(program, cond, tasks, writer=run.backend("executor"),
                            packs=getattr(run.benchmark, "skill_packs", None))
        counted = None if progress is None else (
            lambda d, t, before=i * len(tasks): progress(before + d, len(conditions) * len(tasks)))
        try:
            episodes = run_episodes(run.context(prog), run.benchmark, run.backend("executor"), tasks,
                                    store=run.store, run=run, progress=counted, **kw)
            out[cond] = summarize(prog.id, tasks[0].split if tasks else "", episodes)
            out[cond].episodes = episodes  # type: ignore[attr-defined]
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
    return out


def gains_table(evals: dict[str, Evaluation]) -> list[list[str]]:
    base = evals.get("none")
    rows = []
    for cond, ev in evals.items():
        if base is None or cond == "none":
            rows.append([cond, f"{ev.score:.3f}", f"{ev.success:.3f}", "", "", f"{ev.context_tokens:.0f}"])
            continue
        g = normalised_gain(ev.score, base.score)
        rows.append([cond, f"{ev.score:.3f}", f"{ev.success:.3f}", f"{ev.score - base.score:+.3f}",
                     "n/a" if g is None else f"{g:+.3f}", f"{ev.context_tokens:.0f}"])
    return rows
