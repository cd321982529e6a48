"""The AutoSkill 7-tuple (name, description, instructions, triggers, tags, examples, version) as an
Agent Skills folder, and the hard caps that keep a skill from bloating.

On disk a card is an ordinary ``<name>/SKILL.md``: ``name`` and ``description`` as the spec wants,
``version``, ``triggers``, ``tags``, ``examples`` (and ``always_on`` for the general tier) as extra
front-matter keys, the instructions as the body. So the core harness, ``evolver programs show`` and
any Agent Skills reader can use a bank without knowing AutoSkill.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from evolver import EvolverError, Skill, Skills


class SkillCapError(EvolverError):
    """A card over a hard cap (the message names the field, the size and the cap)."""


@dataclass(frozen=True)
class CardCaps:
    """Hard caps. The reference implementation let one skill reach v0.1.24 with ~100 triggers: every
    retrieval then drags that bloat into the context, so past these numbers a card is refused (on
    write) or trimmed (when a model proposed it), never stored."""

    max_description_chars: int = 300
    max_instructions_chars: int = 2000
    max_triggers: int = 8
    max_trigger_chars: int = 60
    max_tags: int = 6
    max_tag_chars: int = 30
    max_examples: int = 3
    max_example_chars: int = 300


CAPS = CardCaps()
_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


@dataclass
class SkillCard:
    name: str
    description: str
    instructions: str
    triggers: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    version: str = "0.1.0"
    always_on: bool = False  # the general tier: injected for every request, whatever the query

    def problems(self, caps: CardCaps = CAPS) -> list[str]:
        """Every cap this card breaks, as sentences that say what to do; empty when it fits."""
        out = []
        if len(self.description) > caps.max_description_chars:
            out.append(f"description is {len(self.description)} chars (cap {caps.max_description_chars}): "
                       "say only when to use the skill")
        if len(self.instructions) > caps.max_instructions_chars:
            out.append(f"instructions are {len(self.instructions)} chars (cap {caps.max_instructions_chars}): "
                       "merge overlapping rules or split the skill")
        for label, items, n, chars in (("triggers", self.triggers, caps.max_triggers, caps.max_trigger_chars),
                                       ("tags", self.tags, caps.max_tags, caps.max_tag_chars),
                                       ("examples", self.examples, caps.max_examples, caps.max_example_chars)):
            if len(items) > n:
                out.append(f"{len(items)} {label} (cap {n}): keep the most telling ones")
            long = [x for x in items if len(x) > chars]
            if long:
                out.append(f"{label} entry {long[0][:40]!r}... is {len(long[0])} chars (cap {chars})")
        if not _SEMVER.match(self.version):
            out.append(f"version {self.version!r} is not MAJOR.MINOR.PATCH (e.g. 0.1.0)")
        return out

    def check(self, caps: CardCaps = CAPS) -> "SkillCard":
        Skills.check_name(self.name, self.name)
        if not self.description.strip():
            raise SkillCapError(f"skill {self.name!r}: empty description; say when to use the skill")
        if not self.instructions.strip():
            raise SkillCapError(f"skill {self.name!r}: empty instructions; a skill must say what to do")
        problems = self.problems(caps)
        if problems:
            raise SkillCapError(f"skill {self.name!r} breaks its caps: " + "; ".join(problems))
        return self

    def clamp(self, caps: CardCaps = CAPS) -> tuple["SkillCard", list[str]]:
        """A copy trimmed to the caps (for model-written cards) and a note per cut; duplicates (case and
        spacing ignored) are dropped first so a cut never costs a distinct entry to a repeated one."""
        notes = []

        def fit(items: list[str], n: int, chars: int, label: str) -> list[str]:
            seen, kept = set(), []
            for item in (" ".join(str(x).split()) for x in items):
                key = item.lower()
                if item and key not in seen:
                    seen.add(key)
                    kept.append(item[:chars])
            if len(kept) > n:
                notes.append(f"{label}: kept {n} of {len(kept)}")
            return kept[:n]

        desc = " ".join(self.description.split())
        if len(desc) > caps.max_description_chars:
            notes.append(f"description cut to {caps.max_description_chars} chars")
            desc = desc[:caps.max_description_chars].rstrip()
        instructions = self.instructions.strip()
        if len(instructions) > caps.max_instructions_chars:
            # Cut at a line boundary: half a rule is worse than no rule.
            cut = instructions[:caps.max_instructions_chars]
            instructions = cut[:cut.rfind("\n")] if "\n" in cut else cut
            notes.append(f"instructions cut to {len(instructions)} chars")
        card = replace(self, description=desc, instructions=instructions,
                       triggers=fit(self.triggers, caps.max_triggers, caps.max_trigger_chars, "triggers"),
                       tags=fit([t.lower() for t in self.tags], caps.max_tags, caps.max_tag_chars, "tags"),
                       examples=fit(self.examples, caps.max_examples, caps.max_example_chars, "examples"))
        return card, notes

    def search_text(self) -> str:
        """What retrieval indexes: when to use it (name, description, triggers, tags) before how."""
        return " ".join([self.name.replace("-", " "), self.description, " ".join(self.triggers),
                         " ".join(self.tags), self.instructions])

    def embed_text(self) -> str:
        """What the dense embedding sees: only when to use the skill. The request has to match that;
        the instructions say how (BM25 still indexes them), and leaving them out makes encoding a bank
        ~3x cheaper (MiniLM's cost grows with tokens)."""
        return " ".join([self.name.replace("-", " "), self.description, " ".join(self.triggers), " ".join(self.tags)])

    def render(self) -> str:
        """The compact block injected into a model's context (Render(H_t) in the paper)."""
        lines = [f"### {self.name} (v{self.version})", self.description, self.instructions.strip()]
        if self.examples:
            lines.append("Examples: " + " | ".join(self.examples))
        return "\n".join(lines)


def bump(version: str, part: str = "patch") -> str:
    """Semantic version bump: a merge is a patch (0.1.3 -> 0.1.4), as in AutoSkill's version chains."""
    m = _SEMVER.match(version or "")
    if not m:
        raise SkillCapError(f"cannot bump version {version!r}: expected MAJOR.MINOR.PATCH such as 0.1.0")
    major, minor, patch = map(int, m.groups())
    if part == "major":
        return f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"


def slug(text: str, limit: int = 48) -> str:
    """A valid skill name from free text ("Formal E-mails!" -> "formal-e-mails")."""
    out = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return out or "skill"


def _str_list(value, path: Path, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise SkillCapError(f"{path}: `{key}` must be a YAML list of strings, not {type(value).__name__}")
    return [str(v) for v in value]


def card_from_skill(skill: Skill) -> SkillCard:
    """Any Agent Skill as a card; missing AutoSkill fields get their empty defaults (version 0.1.0)."""
    meta = skill.meta
    return SkillCard(name=skill.name, description=skill.description, instructions=skill.body,
                     triggers=_str_list(meta.get("triggers"), skill.path, "triggers"),
                     tags=_str_list(meta.get("tags"), skill.path, "tags"),
                     examples=_str_list(meta.get("examples"), skill.path, "examples"),
                     version=str(meta.get("version", "0.1.0")), always_on=bool(meta.get("always_on", False)))


def read_card(folder: Path) -> SkillCard:
    return card_from_skill(Skills.parse(Path(folder)))


def write_card(skills_dir: Path, card: SkillCard, caps: CardCaps = CAPS) -> Path:
    """Write ``skills_dir/<name>/SKILL.md``; a card over its caps raises and writes nothing."""
    card.check(caps)
    meta = {"version": card.version, "triggers": card.triggers, "tags": card.tags, "examples": card.examples}
    if card.always_on:
        meta["always_on"] = True
    return Skills.write(Path(skills_dir), card.name, card.description, card.instructions, meta=meta)
