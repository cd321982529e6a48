"""The SkillBank: Agent Skills folders in the program repository, in three tiers.

- ``general``: principles for every task (exploration, state tracking, goal checking); always in context.
- ``task``: procedures and constraints of one task category (``category`` in the front matter),
  retrieved by embedding similarity (:mod:`evolver_skillrl.retrieval`).
- ``lesson``: what went wrong in a failed trajectory: where it failed, the wrong action, the right
  action, the general rule; retrieved like task skills of their category.

A bank skill is an ordinary skill folder whose front matter says ``tier`` (and ``category``, ``origin``,
``sources``: the episode ids it was distilled from); any program can hold one, git versions it, and every
change is a commit (:func:`commit_bank`). Task ids and gold paths never go into a skill: the core's
leakage audit runs on every commit.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from evolver import EvolverError, Program, Skill, SkillChecks, Skills

TIERS = ("general", "task", "lesson")
#: The default harness's constant for how many skill bodies it injects (see fit_harness).
_INJECT_RE = re.compile(r"^INJECT_SKILLS\s*=\s*(\d+)", re.M)


class BankError(EvolverError):
    pass


@dataclass
class BankEntry:
    """One distilled skill or lesson before it is written."""

    tier: str
    name: str
    description: str
    body: str
    category: str | None = None
    origin: str = ""  # gold | success | failure | rules
    sources: list[str] = field(default_factory=list)  # episode ids (never task ids: those would leak)

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise BankError(f"unknown tier {self.tier!r}; tiers are {', '.join(TIERS)}")
        if self.tier != "general" and not self.category:
            raise BankError(f"a {self.tier} entry needs a category (the task category it is about)")

    @property
    def text(self) -> str:
        """What retrieval and dedup compare: description and body."""
        return f"{self.description}\n{self.body}"


def lesson_body(where: str, wrong: str, right: str, rule: str) -> str:
    return (f"Where it failed: {where.strip()}\nWrong action: {wrong.strip()}\n"
            f"Right action: {right.strip()}\nRule: {rule.strip()}")


def tier_of(skill: Skill) -> str | None:
    tier = skill.meta.get("tier")
    return tier if tier in TIERS else None


def bank_of(skills: list[Skill]) -> list[Skill]:
    """The skills that belong to a SkillBank (a tier in their front matter)."""
    return [s for s in skills if tier_of(s)]


def counts(skills: list[Skill]) -> dict[str, int]:
    out = {t: 0 for t in TIERS}
    for s in skills:
        if tier_of(s):
            out[tier_of(s)] += 1
    return out


def load_bank(root: str | Path) -> list[Skill]:
    skills_dir = Path(root) / "skills"
    return bank_of(Skills.load(skills_dir)) if skills_dir.is_dir() else []


def slug(text: str, limit: int = 48) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    return s[:limit].rstrip("-") or "skill"


def write_entry(skills_dir: Path, entry: BankEntry) -> Path:
    """Write one entry as a skill folder; a taken name gets a numeric suffix."""
    prefix = slug({"general": "general", "task": entry.category, "lesson": f"lesson-{entry.category}"}[entry.tier])
    base = slug(entry.name)
    for word in ("lesson", slug(entry.category or "general"), "general"):  # the prefix says these already
        base = base.removeprefix(f"{word}-")
    base = slug(f"{prefix}-{base}", 60)
    name, n = base, 2
    while (Path(skills_dir) / name).exists():
        name, n = f"{base[:58]}-{n}", n + 1
    meta = {"tier": entry.tier, "category": entry.category, "origin": entry.origin, "sources": list(entry.sources)}
    return Skills.write(Path(skills_dir), name, entry.description, entry.body,
                        meta={k: v for k, v in meta.items() if v not in (None, "", [])})


def fit_harness(root: Path, wanted: int) -> bool:
    """Let the default harness inject ``wanted`` skill bodies (general + top-K): it asks the
    select_skills hook for ``INJECT_SKILLS`` of them and the core cuts the answer to that. Raises the
    constant when lower; a harness without it (an evolved one) decides for itself. True if changed."""
    path = Path(root) / "harness" / "harness.py"
    if not path.is_file():
        return False
    text = path.read_text()
    m = _INJECT_RE.search(text)
    if not m or int(m.group(1)) >= wanted:
        return False
    path.write_text(text[:m.start(1)] + str(wanted) + text[m.end(1):])
    return True


def write_entries(root: Path, entries: list[BankEntry], inject: int | None = None) -> list[str]:
    """Write entries into a program checkout; returns the skill names written."""
    skills_dir = Path(root) / "skills"
    names = [write_entry(skills_dir, e).name for e in entries]
    if inject:
        n_general = counts(load_bank(root))["general"]
        fit_harness(Path(root), n_general + inject)
    return names


def commit_bank(run, parent: Program, entries: list[BankEntry], message: str, operator: str = "skillrl",
                forbidden: list[str] = (), sequences: list[list[str]] = (), inject: int | None = None,
                detail: dict | None = None) -> Program:
    """Add ``entries`` to ``parent``'s bank as a child program (one commit), checked like any candidate:
    skill schema and caps, and the leakage audit against ``forbidden`` strings and gold ``sequences``.
    The new program is registered in the store. Raises :class:`BankError` naming what failed."""
    if not entries:
        raise BankError("nothing to commit: no entries")
    cid = f"skillrl-{uuid.uuid4().hex[:8]}"
    path = run.repo.new_candidate(cid, parent.commit)
    try:
        names = write_entries(path, entries, inject)
        problem = SkillChecks.check_files(path, parent_root=Path(parent.root)) or SkillChecks.audit_leakage(
            path, list(forbidden), [list(s) for s in sequences], Path(parent.root))
        if problem:
            raise BankError(f"bank change rejected: {problem}")
        bank = counts(load_bank(path))
        manifest = {"parent": parent.id, "operator": operator, "proposal": cid,
                    "model": parent.manifest.get("model", "embedded"),
                    "bank": bank, "added": names, **(detail or {})}
        program = run.repo.commit_candidate(cid, manifest, f"{operator}: {message}\n\nadded: {', '.join(names)}\n"
                                                           f"bank: {bank}")
    finally:
        run.repo.remove_worktree(cid)
    run.store.add_program(program.id, run.id, program.commit, program.hash, parent.id, operator, None, program.manifest)
    return run.repo.checkout(program.id)
