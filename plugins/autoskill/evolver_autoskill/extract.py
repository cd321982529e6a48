"""Extraction: a candidate skill from the user's turns (never the model's answers), or from an agent
episode's trace.

What counts as a skill (the paper's M_ext rules): durable constraints, reusable procedures, task
policies and recurring corrections. A one-off request ("translate this sentence") is not a skill, so
a candidate needs evidence that the user wants it again: a durable marker ("always", "from now on",
"I prefer", "never", ...) or the same correction stated in two turns.

Two extractors share one output type: :class:`RuleExtractor` (no model, deterministic: the default
for small local models, which cannot be trusted to write JSON) and :class:`LLMExtractor` (the paper's
prompted extractor, for capable models; its answer is validated and clamped to the caps).
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field

from evolver import Episode, GenRequest, Message, Skills
from evolver_autoskill.card import SkillCard, slug

DURABLE = re.compile(
    r"\b(always|never|every time|each time|from now on|going forward|in (the )?future|by default|"
    r"remember|i (usually |really )?(prefer|like|want|need)|don'?t ever|do not ever|make sure|"
    r"please (always|don'?t|do not|avoid|keep|use)|avoid|no more than|at most|at least|instead of|"
    r"keep (it|them|the)|stop (using|adding))\b", re.I)
# A repeated sentence is a correction only if it constrains the answer; a re-asked question or a repeated
# "thanks" is not (both happen in real chats).
CONSTRAINT = re.compile(
    r"\b(not|no|don'?t|never|only|without|instead|use|keep|avoid|shorter|longer|simpler|formal|informal|polite|"
    r"concise|brief|bullets?|format|tone|style|language|words|sentences|lines|spelling|units)\b", re.I)
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_GENERIC = frozenset("please write make give help want need like prefer always never every time now "
                     "future remember also just some thing things can could would should me my our us "
                     "one more less very really don do not it them keep sure".split())


@dataclass
class Candidate:
    card: SkillCard
    confidence: float
    evidence: list[str] = field(default_factory=list)  # conversation:<id> / episode:<id>
    why: str = ""


def sentences(text: str) -> list[str]:
    return [s.strip(" -*\t") for s in _SENTENCE.split(text) if len(s.strip()) > 3]


def _overlap(a: str, b: str) -> float:
    ta, tb = set(Skills.tokens(a)), set(Skills.tokens(b))
    return len(ta & tb) / max(1, min(len(ta), len(tb))) if ta and tb else 0.0


class RuleExtractor:
    def __init__(self, min_confidence: float = 0.5):
        self.min_confidence = min_confidence

    def from_user_turns(self, turns: list[str], evidence: list[str]) -> Candidate | None:
        """``turns``: the user's messages only, oldest first (see :func:`rewrite.user_turns`)."""
        turns = [t for t in turns if t.strip()]
        if not turns:
            return None
        per_turn = [sentences(t) for t in turns]
        durable = [s for ss in per_turn for s in ss if DURABLE.search(s)]
        repeated = []  # a correction stated again in a later turn
        for i in range(len(per_turn)):
            for j in range(i + 1, len(per_turn)):
                repeated += [s for s in per_turn[j] for r in per_turn[i]
                             if len(Skills.tokens(s)) >= 2 and CONSTRAINT.search(s) and _overlap(s, r) >= 0.6]
        rules = _dedupe(durable + repeated)
        if not rules:
            return None  # a one-off request: nothing says the user wants this again
        confidence = min(1.0, 0.4 + 0.2 * len(durable) + 0.2 * bool(repeated))
        if confidence < self.min_confidence:
            return None
        anchor = next((t for t in turns if not DURABLE.search(t) or len(turns) == 1), turns[0])
        return Candidate(self._card(anchor, rules, turns), confidence, list(evidence),
                         f"{len(durable)} durable constraint(s), {len(repeated)} repeated correction(s)")

    def _card(self, anchor: str, rules: list[str], turns: list[str]) -> SkillCard:
        words = [w for w in Skills.tokens(anchor) if w not in _GENERIC and not w.isdigit()]
        topic = [w for w, _ in Counter(words).most_common()][:3] or [w for w in Skills.tokens(" ".join(rules))][:3]
        gist = " ".join(anchor.split())[:150]
        rule_words = Counter(w for r in rules for w in Skills.tokens(r) if w not in _GENERIC)
        return SkillCard(name=slug("-".join(topic) or "user-preference"),
                         description=f"Use when the user asks for: {gist}",
                         instructions="\n".join(f"- {r.rstrip('.')}." for r in rules),
                         triggers=_dedupe([" ".join(topic)] + [w for w in words[:6]])[:5],
                         tags=[w for w, _ in rule_words.most_common(3)] + topic[:1],
                         examples=[gist])

    def from_episode(self, episode: Episode, min_score: float = 0.8) -> Candidate | None:
        """A procedure from a successful *training* episode: the actions that raised the score, in order.

        Only train-split episodes: distilling dev or test trajectories would leak the split that
        selection (or the final report) is scored on."""
        if episode.task.split != "train" or episode.score < min_score or not episode.steps:
            return None
        raised, last = [], 0.0
        for step in episode.steps:
            if step.action and step.reward > last:
                raised.append(step.action)
            last = max(last, step.reward)
        if not raised:
            return None
        cat = episode.task.category or episode.task.benchmark
        card = SkillCard(name=slug(f"{cat}-procedure"),
                         description=f"Use when playing {cat} tasks like: "
                                     f"{' '.join(episode.task.prompt.split())[:120]}",
                         instructions="Steps that raised the score in a won episode; adapt the objects to "
                                      "the current task:\n" + "\n".join(f"{i + 1}. {a}" for i, a in enumerate(raised)),
                         triggers=[cat], tags=[cat, episode.task.benchmark])
        return Candidate(card, min(1.0, episode.score), [f"episode:{episode.id}"], f"{len(raised)} scoring actions")


def _dedupe(items: list[str]) -> list[str]:
    out: list[str] = []
    for s in (" ".join(x.split()) for x in items):
        if s and all(_overlap(s, o) < 0.8 for o in out):
            out.append(s)
    return out


EXTRACT_PROMPT = """You maintain a library of reusable skills learned from a user's requests.
Below are ONLY the user's messages (not the assistant's). Extract at most one skill: a durable
preference, a reusable procedure, a task policy or a correction the user repeats. A one-off request is
NOT a skill: then answer {{"skill": null}}. Never invent details the user did not state.

User messages, oldest first:
{turns}

Answer with one JSON object:
{{"name": "lowercase-hyphenated", "description": "Use when ...", "instructions": "- rule\\n- rule",
"triggers": ["..."], "tags": ["..."], "examples": ["..."], "confidence": 0.0-1.0}}"""


def parse_json_object(text: str) -> dict | None:
    """The first JSON object in a model's answer (models wrap JSON in prose or code fences)."""
    start = text.find("{")
    while start != -1:
        depth = 0
        for end in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                try:
                    value = json.loads(text[start:end + 1])
                    return value if isinstance(value, dict) else None
                except json.JSONDecodeError:
                    break
        start = text.find("{", start + 1)
    return None


def card_from_json(data: dict) -> SkillCard | None:
    def strings(key):
        v = data.get(key) or []
        return [str(x) for x in (v if isinstance(v, list) else [v])]
    name, desc, instr = data.get("name"), data.get("description"), data.get("instructions")
    if isinstance(instr, list):
        instr = "\n".join(f"- {x}" for x in instr)
    if not (isinstance(name, str) and isinstance(desc, str) and isinstance(instr, str)) or not instr.strip():
        return None
    return SkillCard(name=slug(name), description=desc.strip() or "Use when relevant.", instructions=instr.strip(),
                     triggers=strings("triggers"), tags=strings("tags"), examples=strings("examples"))


class LLMExtractor:
    def __init__(self, backend, min_confidence: float = 0.5, max_tokens: int = 400):
        self.backend, self.min_confidence, self.max_tokens = backend, min_confidence, max_tokens

    def from_user_turns(self, turns: list[str], evidence: list[str]) -> Candidate | None:
        if not turns:
            return None
        listing = "\n".join(f"{i + 1}. {t[:800]}" for i, t in enumerate(turns[-12:]))
        res = self.backend.generate([GenRequest([Message("user", EXTRACT_PROMPT.format(turns=listing))],
                                                max_tokens=self.max_tokens)])[0]
        data = parse_json_object(res.text or "")
        if not data or data.get("skill", "x") is None:
            return None
        card = card_from_json(data)
        try:
            confidence = float(data.get("confidence", 0.0))
        except (TypeError, ValueError):
            confidence = 0.0
        if card is None or confidence < self.min_confidence:
            return None
        return Candidate(card.clamp()[0], confidence, list(evidence), "model-extracted")

    def from_episode(self, episode: Episode, min_score: float = 0.8) -> Candidate | None:
        # Trace distillation by model is the EvoSkill/SKILLRL proposers' job; the rules suffice here.
        return RuleExtractor(self.min_confidence).from_episode(episode, min_score)
