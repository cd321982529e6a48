"""Skills in the Agent Skills format: parsing, validation, caps, writing and rendering.

A skill is a folder ``<name>/SKILL.md``: YAML front matter between ``---`` lines (``name``, ``description``,
any other keys kept in ``meta``), then a Markdown body; optional ``scripts/`` and ``references/`` subfolders.
Proposers write skills with :func:`write_skill`; the harness shows :func:`render_index` (names and
descriptions only: progressive disclosure) and loads a body on demand, or, for models too small to call
tools, injects the bodies :func:`relevant` picks.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from evolver.errors import SkillError

SKILL_FILE = "SKILL.md"
MAX_NAME_CHARS = 64
# The spec's name grammar: lowercase words joined by single hyphens (so it is also a safe folder and tool argument).
NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
# Interpreters the sandbox knows (evolver.sandbox picks the same ones); anything else needs a #! line.
SCRIPT_SUFFIXES = (".py", ".sh", ".bash")
_IGNORED_PARTS = {"__pycache__", ".git", ".DS_Store"}


@dataclass
class SkillCaps:
    """Size limits. They exist because skills that only ever grow (AutoSkill's v0.1.24 with ~100 triggers)
    eat the small model's context; a proposer must merge or trim instead."""

    max_description_chars: int = 1024
    max_body_chars: int = 6000
    max_files: int = 20  # every file in the folder, SKILL.md included
    max_total_bytes: int = 200_000
    max_skills: int = 50


@dataclass
class Skill:
    """A parsed skill folder (see the module docstring); make one with :func:`parse_skill` or :func:`write_skill`."""

    name: str
    description: str
    body: str
    path: Path  # the skill folder
    meta: dict = field(default_factory=dict)  # front-matter keys other than name/description, in file order
    scripts: list[str] = field(default_factory=list)  # paths relative to the folder, e.g. "scripts/solve.py"
    references: list[str] = field(default_factory=list)

    @property
    def packages(self) -> list[str]:
        """Installed distributions the skill's scripts import beyond the standard library (front matter
        ``metadata.packages``): the sandbox shows them these and nothing else that is installed."""
        listed = (self.meta.get("metadata") or {}).get("packages") if isinstance(self.meta.get("metadata"), dict) else None
        return [str(p) for p in listed] if isinstance(listed, list) else []

    @property
    def size_chars(self) -> int:
        """What loading this skill costs in context: the characters of :meth:`render_full`."""
        return len(self.render_full())

    def render_summary(self) -> str:
        return f"- {self.name}: {' '.join(self.description.split())}"

    def render_full(self) -> str:
        parts = [f"## Skill: {self.name}", self.description.strip(), "", self.body]
        if self.scripts:
            parts += ["", "Scripts (run them, do not retype them): " + ", ".join(self.scripts)]
        if self.references:
            parts += ["", "References: " + ", ".join(self.references)]
        return "\n".join(parts).rstrip() + "\n"


def normalise_body(body: str) -> str:
    """Leading blank lines and trailing whitespace carry no meaning; dropping them makes write→parse exact."""
    return body.lstrip("\n").rstrip()


def check_name(name: object, path: Path | str, line: int | None = None) -> str:
    """``name`` if it is a valid skill name (lowercase words joined by hyphens, at most 64 characters), else
    a :class:`SkillError` at ``path`` (``line``) that says how to fix it."""
    if name is None or (isinstance(name, str) and not name.strip()):
        raise SkillError(path, "missing `name`: add `name: <folder-name>` to the front matter", line)
    if not isinstance(name, str):
        raise SkillError(path, f"`name` must be text, not {type(name).__name__}: write the folder name", line)
    if len(name) > MAX_NAME_CHARS:
        raise SkillError(path, f"name {name!r} is {len(name)} chars; use at most {MAX_NAME_CHARS}", line)
    if not NAME_RE.match(name):
        hint = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "my-skill"
        raise SkillError(path, f"bad name {name!r}: use lowercase letters, digits and single hyphens "
                               f"(e.g. {hint!r}), and rename the folder to match", line)
    return name


def _key_line(front_lines: list[str], key: str) -> int | None:
    """File line (1-based) of a top-level front-matter key; the front matter starts on file line 2."""
    for i, text in enumerate(front_lines):
        if re.match(rf"^{re.escape(key)}\s*:", text):
            return i + 2
    return None


def _split_front_matter(path: Path, text: str) -> tuple[list[str], str]:
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        raise SkillError(path, "no front matter: start the file with a `---` line, then `name:` and "
                               "`description:`, then a closing `---` line", 1)
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return lines[1:i], "\n".join(lines[i + 1:])
    raise SkillError(path, "unterminated front matter: add a closing `---` line after the YAML keys", 1)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and not _IGNORED_PARTS.intersection(p.relative_to(folder).parts)
                  and p.suffix != ".pyc")


def parse_skill(folder: Path) -> Skill:
    """Read one skill folder; every malformation raises :class:`SkillError` naming the file and line."""
    folder = Path(folder)
    path = folder / SKILL_FILE
    if not path.is_file():
        raise SkillError(folder, f"missing {SKILL_FILE}: every skill folder needs one "
                                 "(front matter with `name` and `description`, then the instructions)")
    try:
        text = path.read_text(encoding="utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as e:
        raise SkillError(path, f"not UTF-8 text ({e.reason}); save the file as UTF-8") from None
    front_lines, rest = _split_front_matter(path, text.replace("\r\n", "\n"))
    try:
        data = yaml.safe_load("\n".join(front_lines))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = mark.line + 2 if mark is not None else 1
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SkillError(path, f"invalid YAML in front matter: {problem}; quote values that contain "
                               "`: ` or start with a special character", line) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SkillError(path, "front matter must be `key: value` lines (a YAML mapping), "
                               f"not a {type(data).__name__}", 2)
    name = check_name(data.get("name"), path, _key_line(front_lines, "name") or 1)
    if name != folder.name:
        raise SkillError(path, f"name {name!r} differs from the folder name {folder.name!r}: "
                               "rename one so they match", _key_line(front_lines, "name"))
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillError(path, "missing or empty `description`: add `description: <when to use this skill>` "
                               "to the front matter", _key_line(front_lines, "description") or 1)
    files = [p.relative_to(folder).as_posix() for p in _files(folder)]
    return Skill(name=name, description=description.strip(), body=normalise_body(rest), path=folder,
                 meta={k: v for k, v in data.items() if k not in ("name", "description")},
                 scripts=[f for f in files if f.startswith("scripts/")],
                 references=[f for f in files if f.startswith("references/")])


def validate_skill(skill: Skill, caps: SkillCaps | None = None) -> list[str]:
    """Problems that make a well-formed skill unacceptable (caps, unrunnable scripts); empty when fine."""
    caps = caps or SkillCaps()
    problems = []
    if len(skill.description) > caps.max_description_chars:
        problems.append(f"description is {len(skill.description)} chars; the cap is "
                        f"{caps.max_description_chars}: say only when to use the skill")
    if len(skill.body) > caps.max_body_chars:
        problems.append(f"body is {len(skill.body)} chars; the cap is {caps.max_body_chars}: "
                        "move details into references/ or split the skill")
    files = _files(skill.path)
    if len(files) > caps.max_files:
        problems.append(f"{len(files)} files; the cap is {caps.max_files}")
    total = sum(p.stat().st_size for p in files)
    if total > caps.max_total_bytes:
        problems.append(f"{total} bytes in all; the cap is {caps.max_total_bytes}")
    for rel in skill.scripts:
        p = skill.path / rel
        if p.suffix not in SCRIPT_SUFFIXES and not p.read_bytes()[:2] == b"#!":
            problems.append(f"{rel}: no known interpreter; name it *.py or *.sh, or start it with a #! line")
    return problems


def _scan(skills_dir: Path, caps: SkillCaps) -> tuple[list[Skill], list[SkillError]]:
    skills, errors = [], []
    skills_dir = Path(skills_dir)
    if not skills_dir.is_dir():
        return [], []  # a program without skills is valid
    for folder in sorted(p for p in skills_dir.iterdir() if p.is_dir()):
        if folder.name.startswith(".") or folder.name in _IGNORED_PARTS:
            continue
        escape = _link_out(folder)
        if escape:
            errors.append(escape)
            continue
        try:
            skill = parse_skill(folder)
        except SkillError as e:
            errors.append(e)
            continue
        problems = validate_skill(skill, caps)
        if problems:
            errors.extend(SkillError(folder / SKILL_FILE, p) for p in problems)
        else:
            skills.append(skill)
    if len(skills) > caps.max_skills:
        errors.append(SkillError(skills_dir, f"{len(skills)} skills; the cap is {caps.max_skills}: "
                                             "merge or delete some (only the first by name are loaded)"))
        skills = skills[:caps.max_skills]
    return skills, errors


def _link_out(folder: Path) -> SkillError | None:
    """A symlink that leads out of the skill's folder (a reference to /etc/shadow, the store, ...): a skill
    holds its own files, and whatever reads them (the harness, a script) must not be led elsewhere."""
    home = folder.resolve()
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            target = path.resolve()
            if target != home and home not in target.parents:
                return SkillError(path, f"a symlink out of the skill (to {target}): copy the file into the skill")
    return None


def load_skills(skills_dir: Path, caps: SkillCaps | None = None, strict: bool = True) -> list[Skill]:
    """All skills under ``skills_dir``, sorted by name. ``strict`` raises the first problem; otherwise the
    broken skills are left out (see :func:`check_skills` for why)."""
    skills, errors = _scan(skills_dir, caps or SkillCaps())
    if strict and errors:
        raise errors[0]
    return skills


def check_skills(skills_dir: Path, caps: SkillCaps | None = None) -> list[SkillError]:
    """Every problem under ``skills_dir`` (parse errors and cap violations), in folder order."""
    return _scan(skills_dir, caps or SkillCaps())[1]


def _safe_rel(rel: str, where: Path) -> str:
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise SkillError(where, f"bad file name {rel!r}: use a plain relative path inside the skill")
    return p.as_posix()


def write_skill(skills_dir: Path, name: str, description: str, body: str, meta: dict | None = None,
                scripts: dict[str, str] | None = None, references: dict[str, str] | None = None) -> Path:
    """Write (or overwrite) ``skills_dir/<name>/SKILL.md`` and the given files; other existing files in the
    folder are kept. Returns the folder. ``parse_skill`` reads back exactly these values (body normalised)."""
    folder = Path(skills_dir) / str(name)
    check_name(name, folder)
    if not isinstance(description, str) or not description.strip():
        raise SkillError(folder, "empty description: say when to use this skill")
    meta = {k: v for k, v in (meta or {}).items() if k not in ("name", "description")}
    front = yaml.safe_dump({"name": name, "description": description.strip(), **meta}, sort_keys=False,
                           allow_unicode=True, width=1_000_000)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SKILL_FILE).write_text(f"---\n{front}---\n\n{normalise_body(body)}\n", encoding="utf-8")
    for sub, files, mode in (("scripts", scripts, 0o755), ("references", references, 0o644)):
        for rel, content in (files or {}).items():
            target = folder / sub / _safe_rel(rel, folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
            target.chmod(mode)
    parse_skill(folder)  # fail here, not at evaluation time, if something did not round-trip
    return folder


def render_index(skills: list[Skill]) -> str:
    """The system-prompt block: one line per skill, and how to load the full instructions."""
    if not skills:
        return ""
    lines = ["## Skills",
             "Each line names a skill and says when to use it. Before acting on a skill, load its full "
             "instructions with the tool `read_skill <name>`.",
             *(s.render_summary() for s in skills)]
    return "\n".join(lines) + "\n"


# --- lexical relevance ------------------------------------------------------------------------------------

_STOP = frozenset("a an and are as at be by for from has have how i if in into is it its of on or so that the "
                  "then this to use used using was when where which while with you your".split())


def tokens(text: str) -> list[str]:
    """Lowercase alphanumeric words minus stop words, with a plural 's' folded (cheap, deterministic)."""
    out = []
    for w in re.findall(r"[a-z0-9]+", text.lower()):
        if w in _STOP:
            continue
        out.append(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w)
    return out


def relevant(skills: list[Skill], query: str, k: int = 3) -> list[Skill]:
    """The top-``k`` skills by BM25 over name + description + body, ties by name; only scores > 0.

    Name and description are counted twice: they are written to say when the skill applies, the body
    to say how, so a match there is stronger evidence.
    """
    q = set(tokens(query))
    if not q or not skills or k <= 0:
        return []
    docs = [Counter(tokens(f"{s.name} {s.description} " * 2 + s.body)) for s in skills]
    n = len(docs)
    avg_len = sum(sum(d.values()) for d in docs) / n or 1.0
    df = Counter(t for d in docs for t in q if t in d)
    k1, b = 1.2, 0.75
    scored = []
    for skill, d in zip(skills, docs):
        length = sum(d.values())
        score = 0.0
        for t in q:
            tf = d.get(t, 0)
            if tf:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))  # this form never goes negative
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg_len))
        if score > 0:
            scored.append((-score, skill.name, skill))
    return [s for _, _, s in sorted(scored, key=lambda x: (x[0], x[1]))[:k]]


def shipped_skills_dir() -> Path:
    """The folder of the skills that ship with evolver (meta-skills such as ``writing-skills`` and a seed
    library): the repository's top-level ``skills/`` in a source checkout, ``evolver/_shipped_skills/`` in
    an installed wheel (pyproject.toml maps the one onto the other)."""
    here = Path(__file__).resolve().parent
    packaged = here / "_shipped_skills"
    return packaged if packaged.is_dir() else here.parent / "skills"


#: :func:`shipped_skills_dir`, found once.
SHIPPED_SKILLS = shipped_skills_dir()


def pack_folders(packs: dict | None) -> dict[str, list[Path]]:
    """A benchmark's ``skill_packs`` (pack name -> a folder whose subfolders holding a SKILL.md are the pack's
    skills, or a list of skill folders) as pack name -> skill folders, sorted by name."""
    out: dict[str, list[Path]] = {}
    for name, where in (packs or {}).items():
        if isinstance(where, (str, Path)):
            folder = Path(where)
            out[name] = sorted(p for p in folder.iterdir() if (p / SKILL_FILE).is_file()) if folder.is_dir() else []
        else:
            out[name] = [Path(p) for p in where]
    return out


def _known(packs: dict | None) -> str:
    shipped = sorted(p.name for p in SHIPPED_SKILLS.iterdir() if (p / SKILL_FILE).is_file()) \
        if SHIPPED_SKILLS.is_dir() else []
    text = f"shipped: {', '.join(shipped) or 'none'}"
    for name, folders in pack_folders(packs).items():
        text += f"; pack {name}: {', '.join(f.name for f in folders) or 'empty'}"
    return text + ("" if packs else "; this benchmark has no skill packs")


def shipped_skill(name_or_path: str, packs: dict | None = None) -> Path:
    """A skill folder: a path to one, the name of a skill in :func:`shipped_skills_dir`, or the name of one
    skill of a pack in ``packs`` (a benchmark's ``skill_packs``)."""
    folder = Path(name_or_path).expanduser()
    if not (folder / SKILL_FILE).is_file():
        folder = SHIPPED_SKILLS / name_or_path
    if not (folder / SKILL_FILE).is_file():
        members = [f for fs in pack_folders(packs).values() for f in fs if f.name == name_or_path]
        folder = members[0] if members else folder
    if not (folder / SKILL_FILE).is_file():
        raise SkillError(folder, f"seed skill {name_or_path!r}: no SKILL.md there, and no shipped skill, skill pack "
                                 f"or skill of a pack of that name ({_known(packs)})")
    return folder


def seed_skill_folders(names: list[str], packs: dict | None = None) -> list[Path]:
    """The folders ``seed_skills`` names: a pack's name (a benchmark's ``skill_packs``) stands for all its
    skills, any other name is resolved by :func:`shipped_skill`. A skill named twice is kept once; two
    different folders of one name are an error."""
    folders = pack_folders(packs)
    out: dict[str, Path] = {}
    for name in names:
        path = Path(name).expanduser()
        found = [path] if (path / SKILL_FILE).is_file() else folders.get(name) or [shipped_skill(name, packs)]
        for folder in found:
            if folder.name in out and out[folder.name].resolve() != folder.resolve():
                raise SkillError(folder, f"seed skills: two skills named {folder.name!r} ({out[folder.name]} and "
                                         f"{folder}); name one of them")
            out.setdefault(folder.name, folder)
    return list(out.values())


def hand_written(skill_text: str | None) -> bool:
    """Whether a SKILL.md's front matter says ``metadata.hand_written: true``: written by a person for one
    benchmark (an opt-in pack its plugin ships), not learned. Reports label programs that carry one."""
    return bool(skill_meta(skill_text).get("hand_written"))


def front_matter(skill_text: str | None) -> dict:
    """A SKILL.md's front matter as a dict; {} when there is none or it does not parse. Lenient, unlike
    :func:`parse_skill`: labels and history listings read old or malformed versions of a skill too."""
    if not skill_text or not skill_text.startswith("---"):
        return {}
    try:
        data = yaml.safe_load(skill_text[3:].split("\n---", 1)[0])
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def skill_meta(skill_text: str | None) -> dict:
    """The ``metadata`` table of a SKILL.md's front matter; {} when there is none or it does not parse."""
    meta = front_matter(skill_text).get("metadata")
    return meta if isinstance(meta, dict) else {}


class Skills:
    """Reading, checking and writing skill folders (a namespace: ``Skills.parse(folder)``, never an instance).
    The checks a candidate's skills must pass before evaluation are :class:`evolver.checks.SkillChecks`."""

    parse = staticmethod(parse_skill)
    validate = staticmethod(validate_skill)
    load = staticmethod(load_skills)
    write = staticmethod(write_skill)
    check_name = staticmethod(check_name)
    tokens = staticmethod(tokens)
    shipped_dir = staticmethod(shipped_skills_dir)
