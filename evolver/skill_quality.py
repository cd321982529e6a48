"""Does a skill's body say anything? Cheap rules against degenerate bodies.

A small model's broken output often parses as a valid SKILL.md: one sentence written eleven times,
steps that read "1. 1.", "2. 2.", the description or the task prompt copied back, or next to nothing.
The schema check passes them and each one costs a full evaluation; these rules reject them first,
with a reason that names the skill, the rule and the offending text (a proposer's repair prompt and
the next proposal learn from it).

The thresholds are deliberately loose: every shipped skill, and every skill the test suite builds, passes.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

from evolver.skills import tokens

# A sentence with this many content words is a real statement: saying it twice is repetition.
# (Shorter ones such as "open X" or "go north" may recur in a legitimate ordered procedure.)
MIN_REPEATED_WORDS = 4
# Copies of earlier sentences, however short, may not make up this share of the body's words (and 3+ copies).
MAX_COPIED_SHARE = 0.5
# A verbatim run of this many words from a task's text is copying, not advice (a task's boilerplate
# instruction such as "find the answer in the knowledge base" is 7 words and may be quoted).
MAX_TASK_SPAN = 12
# Runs of at least this many words from the description or the tasks (MAX_TASK_SPAN words in all, for
# tasks) may not cover more than this share of the body.
MIN_COPY_SPAN, MAX_COPY_SHARE = 6, 0.5
# Distinct content words a body needs: a short action pattern ("1. open X 2. go Y", SKILLRL's rules
# distiller) has two; filler words ("follow the instructions of the skill") do not count, so
# filler-only bodies fail.
MIN_CONTENT_WORDS = 2
FILLER = frozenset(tokens("skill step task instruction follow agent procedure body description always carefully "
                          "correctly properly good well do make sure just each every all any other thing "
                          "below above here there these those what"))
_PLACEHOLDER_WORDS = {"todo", "tbd", "placeholder", "step", "item", "xxx", "etc", "n/a"}

_MARKER = re.compile(r"^\s*(?:\d+[.)]|[-*+\u2022]|(?:step|item)\s*\d+\s*[:.)\-]?)(?=\s|$)\s*(?P<text>.*)$", re.I)
_RULE = re.compile(r"^\s*([-*_])(?:\s*\1){2,}\s*$")  # a horizontal rule, not a list item
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def shorten(text: str, limit: int = 50) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0] or text[:limit]
    return cut + " ..."


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _content(text: str) -> list[str]:
    return [t for t in tokens(text) if len(t) > 1 and not t.isdigit()]


def _prose_lines(body: str) -> list[str]:
    """The body's lines outside fenced code blocks (code may repeat itself and hold bare numbers)."""
    out, fenced = [], False
    for line in body.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def _sentences(lines: list[str]) -> list[str]:
    """Sentences of the prose, list markers and heading marks removed."""
    out = []
    for line in lines:
        if _RULE.match(line):
            continue
        m = _MARKER.match(line)
        text = (m.group("text") if m else line).lstrip("#> ").strip()
        out += [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
    return out


def _is_placeholder(text: str) -> bool:
    t = text.strip()
    if not re.search(r"[^\W\d_]", t):  # nothing but numbers and punctuation: "1.", "...", "2"
        return True
    m = _MARKER.match(t)
    if m and not m.group("text").strip():  # a bare copy of a marker: "Step 2:"
        return True
    return (t.lower().strip(" .:!") in _PLACEHOLDER_WORDS or bool(re.fullmatch(r"<[^<>]*>|\[[^\[\]]*\]", t)))


def _placeholders(lines: list[str]) -> tuple[list[str], int]:
    """List items that hold no instruction, and the number of list items."""
    items, found = 0, []
    for i, line in enumerate(lines):
        m = _MARKER.match(line)
        if not m or _RULE.match(line):
            continue
        items += 1
        text = m.group("text")
        if not text.strip():  # "Step 1:" with the instruction on the following lines is fine
            following = next((ln for ln in lines[i + 1:] if ln.strip()), "")
            if following and not _MARKER.match(following) and not following.lstrip().startswith("#"):
                continue
        if _is_placeholder(text):
            found.append(line.strip())
    return found, items


def _copied(body: list[str], source: list[str], min_span: int) -> tuple[set[int], list[str]]:
    """Positions of body words inside verbatim runs of ``min_span``+ words of ``source``; the longest run."""
    if min_span < 1 or len(source) < min_span or len(body) < min_span:
        return set(), []
    grams = {tuple(source[i:i + min_span]) for i in range(len(source) - min_span + 1)}
    hay = f" {' '.join(source)} "
    covered: set[int] = set()
    longest: list[str] = []
    i = 0
    while i <= len(body) - min_span:
        if tuple(body[i:i + min_span]) not in grams:
            i += 1
            continue
        end = i + min_span
        while end < len(body) and f" {' '.join(body[i:end + 1])} " in hay:
            end += 1
        covered.update(range(i, end))
        longest = max(longest, body[i:end], key=len)
        i = end
    return covered, longest


def _repetition(sentences: list[str]) -> str:
    keys = [" ".join(_words(s)) for s in sentences]
    counts = Counter(k for k in keys if k)
    for s, k in zip(sentences, keys):
        if counts[k] > 1 and len(_content(s)) >= MIN_REPEATED_WORDS:
            return (f'the body repeats the sentence "{shorten(s)}" {counts[k]} times; '
                    "a skill body must say each thing once")
    extra = sum(n - 1 for k, n in counts.items() if n > 1 and _content(k))
    copied = sum((n - 1) * len(k.split()) for k, n in counts.items() if n > 1 and _content(k))
    total = sum(len(k.split()) for k in keys)
    if extra >= 3 and total and copied / total >= MAX_COPIED_SHARE:
        top = max((k for k in counts if _content(k)), key=lambda k: counts[k])
        example = next(s for s, k in zip(sentences, keys) if k == top)
        return (f"the body repeats itself: {extra} of its {len(keys)} sentences are copies of earlier ones "
                f'(e.g. "{shorten(example)}" {counts[top]} times); a skill body must say each thing once')
    return ""


def _copies_description(words: list[str], description: str) -> str:
    desc = _words(description)
    if not words or not desc:
        return ""
    covered, _ = _copied(words, desc, min(MIN_COPY_SPAN, len(desc)))
    if words == desc or (len(desc) >= 4 and len(covered) > MAX_COPY_SHARE * len(words)):
        return (f'the body copies the description ("{shorten(description)}"); the description says when '
                "to use the skill, the body must say what to do")
    return ""


def _copies_task(words: list[str], task_texts: Iterable[str]) -> str:
    covered: set[int] = set()
    for text in task_texts:
        spans, longest = _copied(words, _words(text or ""), MIN_COPY_SPAN)
        if len(longest) >= MAX_TASK_SPAN:
            return (f"the body copies {len(longest)} words of a task's text verbatim "
                    f'("{shorten(" ".join(longest))}"); a skill must give a general procedure, not restate a task')
        covered |= spans
    if len(covered) >= MAX_TASK_SPAN and len(covered) > MAX_COPY_SHARE * len(words):
        return (f"the body is mostly the tasks' text copied ({len(covered)} of its {len(words)} words); "
                "a skill must give a general procedure, not restate a task")
    return ""


def content_problems(name: str, description: str, body: str, task_texts: Iterable[str] = ()) -> list[str]:
    """Why this skill's body is degenerate, one sentence per broken rule (empty when it is fine):
    numbered placeholders, a repeated sentence, the description or a task's text copied, no content.
    ``task_texts`` are the prompts of the tasks the proposer was shown."""
    lines = _prose_lines(body)
    sentences = _sentences(lines)
    words = [w for s in sentences for w in _words(s)]
    problems = []
    found, items = _placeholders(lines)
    if found:
        shown = ", ".join(f'"{shorten(f, 20)}"' for f in found[:3]) + (", ..." if len(found) > 3 else "")
        problems.append(f"the body has list items with no instruction: {shown} ({len(found)} of {items} items); "
                        "write a real instruction in each step or remove it")
    problems += [p for p in (_repetition(sentences), _copies_description(words, description),
                             _copies_task(words, task_texts)) if p]
    content = set(_content(body)) - FILLER
    if len(content) < MIN_CONTENT_WORDS:
        problems.append(f'the body has almost nothing to say ("{shorten(body, 40)}": {len(content)} distinct '
                        "content words); a skill body must give concrete steps")
    return [f"skill {name!r}: {p}" for p in problems]
