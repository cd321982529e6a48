"""Hybrid retrieval: ``Rel(q, s) = λ·d̂ + (1−λ)·b̂`` over a skill bank, keep the top-K with Rel ≥ η,
plus an always-on tier of general skills.

Per-query normalisation, and why this one:
- BM25 ``b``: divided by the query's best score, so b̂ ∈ [0, 1], the best lexical match is 1 and a
  skill sharing no term stays at 0 (min-max would also push the worst *matching* skill to 0).
- Dense cosine ``d``: min-max between a floor and the query's best cosine,
  ``d̂ = clip((d − floor) / (max d − floor), 0, 1)``. Pure per-query min-max makes the best skill
  score 1 even when every skill is unrelated (MiniLM puts unrelated sentences at cosines ~0.0-0.15);
  the floor keeps "nothing is relevant" expressible, and when no cosine clears it d̂ is 0 for all.
Defaults λ=0.6, η=0.45: a skill can enter on meaning alone (d̂=1 gives 0.6) but not on one shared
word alone (b̂=1 gives 0.4), which is the failure mode of lexical retrieval on short chat turns.

Every retrieval returns its decisions (scores and why each candidate was or was not injected), which
the caller logs to the store.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field

import bm25s
import numpy as np

from evolver import Skills
from evolver_autoskill.card import SkillCard


@dataclass(frozen=True)
class RetrievalConfig:
    lam: float = 0.6
    """λ: weight of the dense score (1−λ goes to BM25)."""
    eta: float = 0.45
    """η: minimum fused score for a skill to be injected."""
    top_k: int = 3
    """K: at most this many retrieved skills per query (the always-on tier comes on top)."""
    dense_floor: float = 0.2
    """Cosine at or below which a skill counts as unrelated (the bottom of d̂'s range)."""
    log_top: int = 8
    """How many scored candidates each retrieval's logged decisions keep (not the whole bank)."""

    def __post_init__(self):
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lam={self.lam}: λ weighs dense against BM25, use a value in [0, 1]")
        if not 0.0 <= self.eta <= 1.0:
            raise ValueError(f"eta={self.eta}: fused scores lie in [0, 1], so η must too")
        if self.top_k < 0:
            raise ValueError(f"top_k={self.top_k}: use 0 (always-on tier only) or more")
        if not -1.0 <= self.dense_floor < 1.0:
            raise ValueError(f"dense_floor={self.dense_floor}: a cosine floor must lie in [-1, 1)")


@dataclass
class Hit:
    name: str
    rel: float
    dense: float
    bm25: float
    dense_hat: float
    bm25_hat: float
    decision: str  # injected | always_on | below_eta | beyond_top_k


@dataclass
class Retrieval:
    query: str
    injected: list[SkillCard]
    hits: list[Hit] = field(default_factory=list)
    latency_s: float = 0.0

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.injected]

    def decisions(self) -> list[dict]:
        return [asdict(h) for h in self.hits]


def _key(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


class HybridRetriever:
    """An index over a list of cards. Rebuild with :meth:`index` when the bank changes; embeddings are
    cached by text, so a rebuild after one merge encodes one card, not the bank."""

    def __init__(self, embedder, config: RetrievalConfig | None = None, cache: dict | None = None):
        """``cache``: text key -> vector, shareable between the retrievers of successive bank versions."""
        self.embedder = embedder
        self.config = config or RetrievalConfig()
        self._vec_cache: dict[str, np.ndarray] = {} if cache is None else cache
        self.cards: list[SkillCard] = []
        self._bm25 = None
        self._dense = np.zeros((0, 1), dtype=np.float32)
        self._always = np.zeros(0, dtype=bool)

    def index(self, cards: list[SkillCard]) -> "HybridRetriever":
        self.cards = list(cards)
        corpus = [Skills.tokens(c.search_text()) for c in self.cards]
        texts = [c.embed_text() for c in self.cards]
        self._bm25 = None
        if any(corpus):
            self._bm25 = bm25s.BM25()
            self._bm25.index(corpus, show_progress=False)
        keys = [_key(t) for t in texts]
        missing = [i for i, k in enumerate(keys) if k not in self._vec_cache]
        if missing:
            vecs = self.embedder.encode([texts[i] for i in missing])
            for i, v in zip(missing, vecs):
                self._vec_cache[keys[i]] = v
        self._dense = (np.stack([self._vec_cache[k] for k in keys]) if keys
                       else np.zeros((0, 1), dtype=np.float32))
        self._always = np.array([c.always_on for c in self.cards], dtype=bool)
        return self

    def scores(self, query: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(fused, dense cosine, bm25) for every indexed card."""
        n = len(self.cards)
        if n == 0:
            return np.zeros(0), np.zeros(0), np.zeros(0)
        q_tokens = Skills.tokens(query)
        bm = (np.asarray(self._bm25.get_scores(q_tokens), dtype=np.float64)
              if self._bm25 is not None and q_tokens else np.zeros(n))
        qv = self.embedder.encode([query])[0]
        dense = self._dense @ qv.astype(self._dense.dtype)
        return self.fuse(dense, bm), dense, bm

    def fuse(self, dense: np.ndarray, bm: np.ndarray) -> np.ndarray:
        return self.config.lam * self.dense_hat(dense) + (1 - self.config.lam) * self.bm25_hat(bm)

    @staticmethod
    def bm25_hat(bm: np.ndarray) -> np.ndarray:
        top = float(bm.max()) if bm.size else 0.0
        return bm / top if top > 0 else np.zeros_like(bm, dtype=np.float64)

    def dense_hat(self, dense: np.ndarray) -> np.ndarray:
        floor = self.config.dense_floor
        top = float(dense.max()) if dense.size else floor
        if top <= floor:
            return np.zeros_like(dense, dtype=np.float64)
        return np.clip((dense.astype(np.float64) - floor) / (top - floor), 0.0, 1.0)

    def _ranked(self, fused: np.ndarray, m: int) -> list[int]:
        """The best ``m`` non-always-on cards, ties broken by name so the same bank and query always
        inject the same skills. A partial sort in numpy: a Python sort of 10k keys per query cost ~50 ms."""
        ranked = np.where(self._always, -np.inf, fused)
        if m <= 0 or not ranked.size:
            return []
        kth = np.partition(ranked, -min(m, ranked.size))[-min(m, ranked.size)]
        # Everything tied with the m-th score is a candidate (a zero-score tie is not worth logging).
        pool = np.flatnonzero(ranked >= kth) if kth > 0 else np.flatnonzero(ranked > 0)
        if pool.size < m:  # fill up with zero-score cards, for the log's sake, in name order
            pool = np.concatenate([pool, np.flatnonzero(ranked == 0)[:m - pool.size]])
        return sorted(pool.tolist(), key=lambda i: (-ranked[i], self.cards[i].name))[:m]

    def retrieve(self, query: str) -> Retrieval:
        started = time.perf_counter()
        cfg = self.config
        fused, dense, bm = self.scores(query)
        d_hat, b_hat = self.dense_hat(dense), self.bm25_hat(bm)
        always = np.flatnonzero(self._always).tolist()
        injected, hits = [self.cards[i] for i in always], []
        for i in always:
            hits.append(Hit(self.cards[i].name, float(fused[i]), float(dense[i]), float(bm[i]),
                            float(d_hat[i]), float(b_hat[i]), "always_on"))
        taken = 0
        for i in self._ranked(fused, max(cfg.log_top, cfg.top_k)):
            if fused[i] < cfg.eta:
                decision = "below_eta"
            elif taken >= cfg.top_k:
                decision = "beyond_top_k"
            else:
                decision = "injected"
                taken += 1
                injected.append(self.cards[i])
            hits.append(Hit(self.cards[i].name, float(fused[i]), float(dense[i]), float(bm[i]),
                            float(d_hat[i]), float(b_hat[i]), decision))
        return Retrieval(query=query, injected=injected, hits=hits, latency_s=time.perf_counter() - started)


def render_skills(cards: list[SkillCard]) -> str:
    """The system block a chat model gets. The paper's serving prompt: skills are context that may
    apply, used only when they match the user's current intent, ignored otherwise."""
    if not cards:
        return ""
    return ("The following skills were learned from this user's earlier requests. Apply a skill only "
            "when it matches what the user is asking now; otherwise ignore it.\n\n"
            + "\n\n".join(c.render() for c in cards))
