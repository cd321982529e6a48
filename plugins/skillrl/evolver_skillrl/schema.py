"""What a teacher must answer: one JSON object, checked field by field.

A successful trajectory becomes a :class:`SkillAnswer` (a general procedure for the category, or a
principle for every task when ``general`` is true); a failed one a :class:`LessonAnswer` with the four
parts SKILLRL asks of a failure lesson. :func:`parse` returns the model or the list of problems, which
the repair call shows to the teacher.
"""
from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

Short = Field(min_length=3, max_length=200)


# The answer formats' own placeholders. A small teacher often copies the format back verbatim (the
# 135M model's only "valid" skill in one seeding was named short-kebab-name with steps
# "first general step", "..."), which passes every length check but says nothing.
PLACEHOLDERS = {"short-kebab-name", "use when ...", "first general step", "...", "the situation where it failed",
                "what it did", "what it should have done", "the general rule that avoids this mistake"}


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    name: str = Field(min_length=3, max_length=60)
    description: str = Field(min_length=10, max_length=300)

    @field_validator("description")
    @classmethod
    def _when(cls, v: str) -> str:
        if not v.lower().startswith("use when"):
            raise ValueError("must start with 'Use when' and say when the skill applies")
        return v

    @model_validator(mode="after")
    def _not_the_template(self):
        copied = []
        for field, value in self.model_dump().items():
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, str) and (v.lower() in PLACEHOLDERS or v.lower().endswith("short-kebab-name")):
                    copied.append(f"{field} {v!r}")
        if copied:
            raise ValueError(f"copies the answer format's placeholder ({', '.join(copied)}): "
                             "write this trajectory's own")
        return self


class SkillAnswer(_Answer):
    steps: list[str] = Field(min_length=1, max_length=8)
    general: bool = False

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: list[str]) -> list[str]:
        v = [str(s).strip() for s in v]
        bad = [i + 1 for i, s in enumerate(v) if not 3 <= len(s) <= 200]
        if bad:
            raise ValueError(f"steps {bad} must each be 3 to 200 characters")
        return v


class LessonAnswer(_Answer):
    where: str = Short
    wrong_action: str = Field(min_length=1, max_length=120)
    right_action: str = Field(min_length=1, max_length=120)
    rule: str = Field(min_length=10, max_length=300)


SKILL_FORMAT = ('{"name": "short-kebab-name", "description": "Use when ...", '
                '"steps": ["first general step", "..."], "general": false}')
LESSON_FORMAT = ('{"name": "short-kebab-name", "description": "Use when ...", "where": "the situation where it '
                 'failed", "wrong_action": "what it did", "right_action": "what it should have done", '
                 '"rule": "the general rule that avoids this mistake"}')


def first_json_object(text: str) -> str | None:
    """The first balanced ``{...}`` in ``text`` (strings and escapes respected), or None."""
    start = text.find("{")
    while start != -1:
        depth, in_str, esc = 0, False, False
        for i in range(start, len(text)):
            c = text[i]
            if in_str:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i + 1]
        start = text.find("{", start + 1)
    return None


def parse(text: str, model: type[_Answer]) -> tuple[_Answer | None, list[str]]:
    """(answer, []) when ``text`` holds a valid object, else (None, problems)."""
    raw = first_json_object(text or "")
    if raw is None:
        return None, ["no JSON object found: answer with one {...} object and nothing else"]
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, [f"invalid JSON ({exc.msg} at character {exc.pos})"]
    if not isinstance(data, dict):
        return None, ["the answer must be a JSON object"]
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, [f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors()]
