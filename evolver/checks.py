"""Cheap checks before a candidate spends evaluation: skill schema and caps, a harness import check
in a sandboxed subprocess, a leakage audit (literal task ids and gold answers), an audit of harness code
that recognises particular tasks, and one smoke episode (run by the loop, its harness sandboxed too).

Each check returns a reason string ('' when the candidate passes); the loop logs the reason with the
rejected proposal, so a broken candidate never crashes a run.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from evolver.sandbox import parse_python, run_python
from evolver.skill_quality import content_problems
from evolver.skills import SKILL_FILE, SkillCaps, check_skills, load_skills

TEXT_SUFFIXES = {".md", ".py", ".txt", ".toml", ".json", ".yaml", ".yml", ".sh", ".js", ".ts"}


def check_skill_files(root: Path, caps: SkillCaps | None = None, task_texts: list[str] | None = None,
                      parent_root: Path | None = None) -> str:
    """Skill schema and caps for every skill, then the degenerate-content rules of
    :mod:`evolver.skill_quality` (``task_texts``: the prompts of the tasks the proposer was shown) for
    the skills the candidate added or changed: a SKILL.md identical to the parent's is not held
    against the candidate."""
    skills_dir = root / "skills"
    if not skills_dir.exists():
        return ""
    caps = caps or SkillCaps()
    errors = check_skills(skills_dir, caps)
    if errors:
        return "malformed skill: " + "; ".join(str(e) for e in errors[:3])
    problems = []
    for skill in load_skills(skills_dir, caps, strict=False):
        before = parent_root / "skills" / skill.name / SKILL_FILE if parent_root else None
        if before is not None and before.is_file() and \
                before.read_bytes() == (skill.path / SKILL_FILE).read_bytes():
            continue
        problems += content_problems(skill.name, skill.description, skill.body, task_texts or ())[:1]
    return "degenerate " + "; ".join(problems[:3]) if problems else ""


def check_harness_import(root: Path, timeout_s: float = 30) -> str:
    """Import harness/harness.py in a sandboxed subprocess (it may hang or crash: not in-process)."""
    code = ("import sys; from evolver.harness import load_harness_class; "
            f"cls = load_harness_class({str(root)!r}); "
            "missing = [m for m in ('start', 'next_call', 'parse', 'observe') if not hasattr(cls, m)]; "
            "print('missing', missing) if missing else None; sys.exit(3 if missing else 0)")
    res = run_python(code, timeout_s=timeout_s, memory_mb=2048, visible=[Path(root)])
    if res.timed_out:
        return f"harness import timed out after {timeout_s:.0f}s"
    if res.memory_exceeded:
        return "harness import exceeded the memory limit"
    if res.returncode == 3:
        return f"harness lacks methods: {res.stdout.strip()}"
    if res.returncode != 0:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-8:])
        return f"harness import failed (exit {res.returncode}):\n{tail}"
    return ""


def _candidate_text(root: Path) -> str:
    parts = []
    for sub in ("skills", "harness", "prompt.md"):
        base = root / sub
        files = [base] if base.is_file() else (sorted(base.rglob("*")) if base.exists() else [])
        for f in files:
            if f.is_file() and f.suffix in TEXT_SUFFIXES and "__pycache__" not in f.parts:
                parts.append(f.read_text(errors="replace"))
    return "\n".join(parts)


def audit_leakage(root: Path, forbidden: list[str], sequences: list[list[str]], parent_root: Path | None = None,
                  tasks: list = ()) -> str:
    """Reject gold answers or task ids of the tasks a candidate was built from.

    - ``forbidden`` strings (task ids, gold answers) must not appear as whole words; strings shorter
      than 4 characters are matched in context instead (a "4" in a skill is not a leak of the answer 4).
    - a short gold answer of one of ``tasks`` (the tasks shown to the proposer) leaks when it appears
      within 80 characters of two distinctive words of that task's prompt: "apples ... 7".
    - a gold action ``sequence`` leaks when three of its consecutive steps appear in order within
      300 characters (single actions like "open fridge" are legitimate advice).
    Text the parent already had is not held against the candidate.
    """
    text = _candidate_text(root).lower()
    before = _candidate_text(parent_root).lower() if parent_root else ""
    for item in forbidden:
        item = str(item).strip().lower()
        if len(item) < 4:
            continue
        pattern = r"(?<!\w)" + re.escape(item) + r"(?!\w)"
        if re.search(pattern, text) and not re.search(pattern, before):
            return f"leaks a gold answer or task id: {item!r}"
    for task in tasks:
        gold = str(task.gold).strip().lower() if isinstance(task.gold, (str, int, float)) else ""
        if gold and len(gold) < 4:
            near = _answer_in_context(text, gold, task.prompt)
            if near and not _answer_in_context(before, gold, task.prompt):
                return f"leaks the gold answer {gold!r} of task {task.id} next to its words: {near!r}"
    for seq in sequences:
        steps = [s.strip().lower() for s in seq if s and s.strip()]
        for i in range(len(steps) - 2):
            a, b, c = steps[i:i + 3]
            if len({a, b, c}) < 2:
                continue
            pattern = re.escape(a) + r"[\s\S]{0,300}?" + re.escape(b) + r"[\s\S]{0,300}?" + re.escape(c)
            if re.search(pattern, text) and not re.search(pattern, before):
                return f"leaks a gold action sequence: {a!r} -> {b!r} -> {c!r}"
    return ""


_COMMON = set("""about above after again against because before being below between could does doing during
each from further have having here into itself just more most once only other over same should some such than
that their them then there these they this those through under until very what when where which while with
would your answer question many much total""".split())


def _answer_in_context(text: str, answer: str, prompt: str, span: int = 80) -> str:
    """The stretch of ``text`` where ``answer`` (a whole word) stands within ``span`` characters of two
    distinctive words (5+ letters, not common) of ``prompt``; "" when there is none."""
    words = {w for w in re.findall(r"[a-z]{5,}", str(prompt).lower()) if w not in _COMMON}
    if len(words) < 2:
        return ""
    for m in re.finditer(r"(?<!\w)" + re.escape(answer) + r"(?!\w)", text):
        window = text[max(0, m.start() - span):m.end() + span]
        if len(words & set(re.findall(r"[a-z]{5,}", window))) >= 2:
            return " ".join(window.split())[:120]
    return ""


def _task_specific_code(source: str) -> list[str]:
    """What in one harness file recognises particular tasks (see :func:`audit_harness_code`)."""
    try:
        tree = parse_python(source)
    except SyntaxError:
        return []  # the import check reports it
    found = []

    def text(node) -> str:
        return ast.get_source_segment(source, node) or ast.dump(node)

    def about_task(node) -> bool:
        return "task" in text(node).lower()

    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and id(node) not in called:
            if node.attr == "gold":
                found.append(f"reads a gold answer: `{text(node)}`")
            elif node.attr == "seed" and about_task(node.value):
                found.append(f"reads a task's seed: `{text(node)}`")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and node.args[1].value in ("gold", "seed"):
            found.append(f"reads a task's {node.args[1].value}: `{text(node)}`")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            ids = [s for s in sides if isinstance(s, ast.Attribute) and s.attr == "id" and about_task(s.value)]
            literal = [s for s in sides if isinstance(s, (ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict))]
            if ids and literal:
                found.append(f"compares a task id with a literal: `{text(node)}`")
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Attribute) \
                and node.slice.attr in ("id", "seed") and about_task(node.slice.value):
            found.append(f"looks up a table by task id: `{text(node)}`")
    return found


def audit_harness_code(root: Path, parent_root: Path | None = None) -> str:
    """Reject harness code that recognises particular tasks instead of playing them: reading a gold answer
    (``x.gold``), a task's seed, comparing a task id with literals or indexing a table by it. (Literal task
    ids and gold answers in any file are :func:`audit_leakage`'s job.) What the parent already had is not
    held against the candidate."""
    def findings(base: Path | None) -> list[tuple[str, str]]:
        folder = base / "harness" if base else None
        if folder is None or not folder.exists():
            return []
        return [(f.relative_to(base).as_posix(), item) for f in sorted(folder.rglob("*.py"))
                if "__pycache__" not in f.parts for item in _task_specific_code(f.read_text(errors="replace"))]
    before = set(findings(parent_root))
    new = [f"{path} {item}" for path, item in findings(root) if (path, item) not in before]
    if new:
        return "harness names particular tasks: " + "; ".join(new[:3])
    return ""


class SkillChecks:
    """The checks a proposer runs on the skills it writes before they cost an evaluation: degenerate
    content, files and caps, leaked answers (a namespace: ``SkillChecks.audit_leakage(...)``). Each returns
    what is wrong ('' or [] when nothing is)."""

    content_problems = staticmethod(content_problems)
    check_files = staticmethod(check_skill_files)
    audit_leakage = staticmethod(audit_leakage)
