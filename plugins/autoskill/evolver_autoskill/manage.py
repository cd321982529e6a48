"""Management: nearest existing skills -> a judge decides add / merge / discard -> the bank commits.

Deterministic guardrails come before and after the judge, because a judge (a small model especially)
happily adds the tenth copy of a skill:
- a candidate below the confidence floor is discarded;
- the same name as an existing skill is a merge into it, never a second copy;
- a near-identical description (text ratio or embedding cosine above ``near_duplicate``) is a merge;
- with no neighbour above ``eta`` there is nothing to merge with: add, without asking the judge;
- whatever the judge says, "add" of a near-duplicate becomes "merge";
- a merge that changes nothing (no new rule, trigger, tag or example) is discarded: no empty version.

Neighbours are scored with the retrieval formula (``Rel_m = α·d̂ + (1−α)·b̂``) on a management query
built from the candidate's name, description, triggers and instructions.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace

from evolver import GenRequest, Message
from evolver_autoskill.bank import SkillBank
from evolver_autoskill.card import SkillCard, bump
from evolver_autoskill.extract import Candidate, _dedupe, card_from_json, parse_json_object
from evolver_autoskill.retrieval import HybridRetriever, RetrievalConfig


@dataclass
class Decision:
    action: str  # add | merge | discard
    target: str | None = None  # the existing skill a merge goes into
    reason: str = ""
    by: str = "guardrail"  # guardrail | judge | rule
    neighbours: list[tuple[str, float]] = field(default_factory=list)
    commit: str | None = None
    version: str | None = None


JUDGE_PROMPT = """Decide what to do with a candidate skill given the most similar existing skill.
add: it is a different capability. merge: it refines or extends the existing skill. discard: it adds
nothing reusable. Answer with one word: add, merge or discard.

Candidate: {cand}

Existing: {old}

Decision:"""

MERGE_PROMPT = """Merge two versions of one skill into a single, concise skill. Keep every distinct rule,
drop repeated ones, keep the existing name. Answer with one JSON object with keys name, description,
instructions, triggers, tags, examples.

Existing: {old}

New evidence: {cand}"""


def _show(card: SkillCard) -> str:
    return (f"name={card.name}; description={card.description}; triggers={card.triggers}; "
            f"instructions={card.instructions[:600]}")


def rule_merge(old: SkillCard, new: SkillCard, embedder=None, paraphrase: float = 0.8) -> SkillCard:
    """Union of the two, existing entries first (so a full cap keeps what was there), same name,
    bumped version. A new instruction line that restates an existing one is dropped: same words, or
    (with an embedder) a cosine of at least ``paraphrase`` ("Never use exclamation marks" vs "please
    don't ever use exclamation marks"), which is what made reference skills grow by restatement."""
    old_lines = [ln for ln in old.instructions.splitlines() if ln.strip()]
    new_lines = [ln for ln in new.instructions.splitlines() if ln.strip()]
    if embedder is not None and old_lines and new_lines:
        vecs = embedder.encode(old_lines + new_lines)
        sims = vecs[len(old_lines):] @ vecs[:len(old_lines)].T
        new_lines = [ln for ln, row in zip(new_lines, sims) if float(row.max()) < paraphrase]
    lines = _dedupe(old_lines + new_lines)
    merged = replace(old, instructions="\n".join(lines), triggers=old.triggers + new.triggers,
                     tags=old.tags + new.tags, examples=old.examples + new.examples, version=bump(old.version))
    return merged.clamp()[0]


def _same_content(a: SkillCard, b: SkillCard) -> bool:
    return (a.description, a.instructions, a.triggers, a.tags, a.examples) == \
        (b.description, b.instructions, b.triggers, b.tags, b.examples)


class Manager:
    def __init__(self, bank: SkillBank, embedder, judge=None, alpha: float = 0.6, eta: float = 0.45,
                 near_duplicate: float = 0.92, merge_similarity: float = 0.8, min_confidence: float = 0.5,
                 retriever: HybridRetriever | None = None):
        """``retriever``: an index of the bank as it is now (a server passes its serving index, so
        managing a candidate does not re-index the bank); None builds one per decision."""
        self.bank, self.embedder, self.judge, self._retriever = bank, embedder, judge, retriever
        self.retrieval = RetrievalConfig(lam=alpha, eta=eta, top_k=3)
        self.near_duplicate, self.merge_similarity = near_duplicate, merge_similarity
        self.min_confidence = min_confidence

    def neighbours(self, card: SkillCard, existing: list[SkillCard]) -> list[tuple[SkillCard, float, float]]:
        """(skill, Rel_m, description cosine) of the three closest, best first."""
        if not existing:
            return []
        retriever = self._retriever or HybridRetriever(self.embedder, self.retrieval).index(existing)
        existing = retriever.cards
        query = " ".join([card.name.replace("-", " "), card.description, " ".join(card.triggers), card.instructions])
        fused, _, _ = retriever.scores(query)
        top = sorted(range(len(existing)), key=lambda i: (-fused[i], existing[i].name))[:3]
        vecs = self.embedder.encode([card.description] + [existing[i].description for i in top])
        return [(existing[i], float(fused[i]), float(vecs[1 + j] @ vecs[0])) for j, i in enumerate(top)]

    def decide(self, cand: Candidate) -> Decision:
        existing = self.bank.cards()
        near = self.neighbours(cand.card, existing)
        shown = [(c.name, round(rel, 3)) for c, rel, _ in near]
        if cand.confidence < self.min_confidence:
            return Decision("discard", None, f"confidence {cand.confidence:.2f} < {self.min_confidence}",
                            "guardrail", shown)
        same = next((c for c in existing if c.name == cand.card.name), None)
        if same is not None:
            return Decision("merge", same.name, "same name as an existing skill", "guardrail", shown)
        for c, _, cos in near:
            ratio = difflib.SequenceMatcher(None, c.description.lower(), cand.card.description.lower()).ratio()
            if max(ratio, cos) >= self.near_duplicate:
                return Decision("merge", c.name, f"near-identical description (ratio {ratio:.2f}, cosine "
                                                 f"{cos:.2f})", "guardrail", shown)
        top = [(c, rel, cos) for c, rel, cos in near if rel >= self.retrieval.eta]
        if not top:
            return Decision("add", None, "no existing skill is close", "guardrail", shown)
        best, rel, cos = top[0]
        if self.judge is not None:
            res = self.judge.generate([GenRequest([Message("user", JUDGE_PROMPT.format(
                cand=_show(cand.card), old=_show(best)))], max_tokens=8)])[0]
            word = next((w for w in ("merge", "discard", "add") if w in (res.text or "").lower()), None)
            if word:
                return Decision(word, best.name if word == "merge" else None, f"judge said {word!r}", "judge", shown)
        if rel >= self.merge_similarity:
            return Decision("merge", best.name, f"closest skill at Rel_m {rel:.2f} >= {self.merge_similarity}",
                            "rule", shown)
        return Decision("add", None, f"closest skill at Rel_m {rel:.2f} < {self.merge_similarity}", "rule", shown)

    def merged(self, old: SkillCard, new: SkillCard) -> SkillCard:
        if self.judge is not None:
            res = self.judge.generate([GenRequest([Message("user", MERGE_PROMPT.format(
                old=_show(old), cand=_show(new)))], max_tokens=500)])[0]
            data = parse_json_object(res.text or "")
            card = card_from_json(data) if data else None
            if card is not None:
                return replace(card, name=old.name, version=bump(old.version), always_on=old.always_on).clamp()[0]
        return rule_merge(old, new, self.embedder)

    def apply(self, cand: Candidate, decision: Decision | None = None) -> Decision:
        """Decide (unless given a decision) and commit it to the bank."""
        d = decision or self.decide(cand)
        with self.bank.lock:
            if d.action == "merge":
                old = self.bank.card(d.target)
                if old is None:  # retired since the decision: the candidate stands on its own
                    d = replace(d, action="add", target=None, reason=d.reason + "; target gone")
                else:
                    card = self.merged(old, cand.card)
                    if _same_content(card, old):
                        return replace(d, action="discard", reason=d.reason + "; the merge adds nothing new")
                    d.commit = self.bank.merge(card, cand.evidence, f"why: {d.reason} ({d.by})")
                    d.version = card.version
                    return d
            if d.action == "add":
                card, notes = cand.card.clamp()
                name, n = card.name, 2
                while self.bank.card(name) is not None:  # a different capability under a taken name
                    name, n = f"{card.name[:60]}-{n}", n + 1
                card = replace(card, name=name, version="0.1.0")
                d.commit = self.bank.add(card, cand.evidence, f"why: {d.reason} ({d.by})"
                                         + (f"; trimmed: {', '.join(notes)}" if notes else ""))
                d.target, d.version = card.name, card.version
            return d
