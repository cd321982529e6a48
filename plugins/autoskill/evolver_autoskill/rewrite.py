"""Query rewriting: a multi-turn conversation becomes one retrieval query.

The paper's rules for M_rw: a turn that continues the task keeps the task's anchor and adds its
constraint; a topic change replaces the anchor; a turn with only a style or format constraint
("shorter, please") borrows the anchor from recent history.

The default rewriter does that without a model call, because it runs on every request in front of
the answer: a later user turn starts a new topic only when it could stand alone (enough content
words, and not a durable constraint such as "never use exclamation marks") *and* is semantically far
from the current anchor. :class:`LLMRewriter` asks a model
instead and falls back to these rules when the model's answer is empty.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evolver import GenRequest, Message, Skills
from evolver_autoskill.extract import DURABLE


@dataclass
class Rewrite:
    query: str
    anchor_turn: int  # index (among user turns) where the current topic starts
    topic_changed: bool  # the last user turn started a new topic


def user_turns(messages: list[dict | Message]) -> list[str]:
    """User turns only: the assistant's answers are never evidence of what the user wants."""
    out = []
    for m in messages:
        role, content = (m.get("role"), m.get("content")) if isinstance(m, dict) else (m.role, m.content)
        if role == "user" and isinstance(content, str) and content.strip():
            out.append(content.strip())
    return out


class RuleRewriter:
    def __init__(self, embedder, topic_sim: float = 0.35, standalone_words: int = 4, max_constraints: int = 3,
                 max_chars: int = 600):
        self.embedder = embedder
        self.topic_sim = topic_sim  # below this cosine to the anchor a standalone turn is a new topic
        self.standalone_words = standalone_words
        self.max_constraints = max_constraints
        self.max_chars = max_chars

    def segment_start(self, turns: list[str]) -> int:
        """Index of the user turn where the current topic began."""
        if len(turns) <= 1:
            return 0
        vecs = self.embedder.encode(turns)
        start = 0
        for t in range(1, len(turns)):
            # A constraint ("never use exclamation marks", "always sign with ...") applies to the task
            # at hand, however far its words are from it.
            standalone = len(Skills.tokens(turns[t])) >= self.standalone_words and not DURABLE.search(turns[t])
            anchor = vecs[start:t].mean(axis=0)
            norm = float(np.linalg.norm(anchor)) or 1.0
            if standalone and float(vecs[t] @ anchor) / norm < self.topic_sim:
                start = t
        return start

    def rewrite(self, messages: list) -> Rewrite:
        turns = user_turns(messages)
        if not turns:
            return Rewrite("", 0, False)
        start = self.segment_start(turns)
        anchor, later = turns[start], turns[start + 1:]
        parts = [anchor] + later[-self.max_constraints:]
        query = " ".join(" ".join(p.split()) for p in parts)[:self.max_chars]
        return Rewrite(query, start, start == len(turns) - 1 and len(turns) > 1)


REWRITE_PROMPT = """Rewrite the user's latest request as ONE standalone search query for a skill library.
Rules: if the latest turn continues the same task, keep that task and add the new constraint; if it starts a
different topic, use only the new topic; if it only states a style or format constraint, add the task it
applies to from the earlier turns. Answer with the query only, one line.

User turns, oldest first:
{turns}

Query:"""


class LLMRewriter:
    """M_rw with a model: better on paraphrase and ellipsis, one extra model call per request."""

    def __init__(self, backend, fallback: RuleRewriter, max_tokens: int = 64):
        self.backend, self.fallback, self.max_tokens = backend, fallback, max_tokens

    def rewrite(self, messages: list) -> Rewrite:
        turns = user_turns(messages)
        base = self.fallback.rewrite(messages)
        if not turns:
            return base
        listing = "\n".join(f"{i + 1}. {t[:400]}" for i, t in enumerate(turns[-6:]))
        res = self.backend.generate([GenRequest([Message("user", REWRITE_PROMPT.format(turns=listing))],
                                                max_tokens=self.max_tokens, stop=["\n"])])[0]
        text = " ".join((res.text or "").split())
        return Rewrite(text, base.anchor_turn, base.topic_changed) if text and not res.error else base
