"""The two coupled loops of AutoSkill, independent of HTTP:

- serving: :meth:`AutoSkillService.prepare` rewrites a conversation into a query, retrieves from the
  caller's bank and returns the skills to inject (and logs the decisions);
- evolution: :meth:`AutoSkillService.learn` extracts a candidate from the user's turns, lets the
  manager add / merge / discard it, gates the commit on outcomes when a validator is configured, and
  logs what happened. It runs on one background thread (:meth:`submit`), so bank commits are serial
  and never delay an answer.
"""
from __future__ import annotations

import queue
import sys
import threading
import traceback
from pathlib import Path

from evolver import load_embedder
from evolver_autoskill import records
from evolver_autoskill.bank import SkillBank
from evolver_autoskill.extract import LLMExtractor, RuleExtractor
from evolver_autoskill.gate import retire_useless
from evolver_autoskill.manage import Decision, Manager
from evolver_autoskill.options import AutoSkillOptions
from evolver_autoskill.retrieval import HybridRetriever, Retrieval, RetrievalConfig
from evolver_autoskill.rewrite import LLMRewriter, Rewrite, RuleRewriter, user_turns


class AutoSkillService:
    def __init__(self, root: Path, store, options: AutoSkillOptions | None = None, embedder=None,
                 judge_backend=None, gate=None):
        self.root = Path(root)
        self.store = store
        self.options = options or AutoSkillOptions()
        self.embedder = embedder or load_embedder(self.options.embedder)
        self.judge_backend = judge_backend
        self.gate = gate  # an OutcomeGate, or None
        o = self.options
        self.retrieval_config = RetrievalConfig(lam=o.lam, eta=o.eta, top_k=o.top_k, dense_floor=o.dense_floor)
        rules = RuleRewriter(self.embedder)
        self.rewriter = LLMRewriter(judge_backend, rules) if o.rewriter == "llm" and judge_backend else rules
        self.extractor = (LLMExtractor(judge_backend) if o.extractor == "llm" and judge_backend else RuleExtractor())
        self._banks: dict[str, SkillBank] = {}
        self._retrievers: dict[str, tuple[str, HybridRetriever]] = {}
        self._vectors: dict[str, dict] = {}  # per scope: card text -> embedding, across bank versions
        self._lock = threading.Lock()
        self._jobs: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self.errors: list[str] = []

    # -- serving loop ----------------------------------------------------------------------------

    def bank(self, scope: str | None) -> SkillBank:
        scope = (scope or "default").strip() or "default"
        with self._lock:
            if scope not in self._banks:
                self._banks[scope] = SkillBank(self.root, scope)
            return self._banks[scope]

    def retriever(self, scope: str) -> HybridRetriever:
        """The scope's serving index. Requests read the last published one and never wait for a
        rebuild: the learner publishes a new index right after it changes the bank (:meth:`reindex`)."""
        cached = self._retrievers.get(self.bank(scope).scope)
        return cached[1] if cached is not None else self.reindex(scope)

    def reindex(self, scope: str) -> HybridRetriever:
        bank = self.bank(scope)
        with bank.lock:
            head = bank.head()
            cached = self._retrievers.get(bank.scope)
            if cached is None or cached[0] != head:
                # A new index per bank version (requests may be reading the old one right now); the
                # embeddings of unchanged cards come from the scope's cache.
                cache = self._vectors.setdefault(bank.scope, {})
                retriever = HybridRetriever(self.embedder, self.retrieval_config, cache).index(bank.cards())
                self._retrievers[bank.scope] = (head, retriever)
            return self._retrievers[bank.scope][1]

    def prepare(self, messages: list, scope: str, ref: str = "", log: bool = True) -> tuple[Rewrite, Retrieval]:
        """Rewrite and retrieve. ``log=False`` leaves logging to the caller (the server logs after
        the response is sent, to keep DuckDB writes off the answer's latency)."""
        rewrite = self.rewriter.rewrite(messages)
        retrieval = (self.retriever(scope).retrieve(rewrite.query) if rewrite.query
                     else Retrieval(query="", injected=[]))
        if log:
            self.log_retrieval(scope, ref, retrieval)
        return rewrite, retrieval

    def log_retrieval(self, scope: str, ref: str, retrieval: Retrieval) -> None:
        if self.store is not None:
            records.log_retrieval(self.store, self.bank(scope).scope, "serve", ref, retrieval)

    # -- evolution loop --------------------------------------------------------------------------

    def learn(self, messages: list, scope: str, evidence: list[str]) -> Decision | None:
        bank = self.bank(scope)
        decision = None
        cand = self.extractor.from_user_turns(user_turns(messages), evidence)
        if cand is not None:
            judge = self.judge_backend if self.options.judge else None
            manager = Manager(bank, self.embedder, judge=judge, alpha=self.options.lam, eta=self.options.eta,
                              retriever=self.reindex(scope))
            decision = manager.apply(cand)
            result = self.gate.check(bank, decision.commit) if decision.commit and self.gate else None
            if result is not None:
                decision.reason += (f"; gate {result.before:.3f} -> {result.after:.3f} "
                                    f"({'kept' if result.kept else 'reverted'})")
            self._record(bank, decision, cand.evidence, cand.card.name)
            if result is not None and not result.kept and self.store is not None:  # logged after what it undoes
                records.log_event(self.store, bank.scope, "revert", decision.target, None, result.revert_commit,
                                  [f"commit:{decision.commit}"], "outcome gate: validation score got worse",
                                  {"before": result.before, "after": result.after})
        if self.store is not None and self.options.retire_min_uses > 0:
            # One query when nothing qualifies; retiring needs outcomes (feedback or episode scores).
            retire_useless(bank, self.store, min_uses=self.options.retire_min_uses)
        self.reindex(scope)  # publish the bank's new state to the serving path (a no-op when unchanged)
        return decision

    def _record(self, bank: SkillBank, d: Decision, evidence: list[str], name: str) -> None:
        if self.store is not None:
            records.log_event(self.store, bank.scope, d.action, d.target or name, d.version, d.commit, evidence,
                              d.reason, {"by": d.by, "neighbours": d.neighbours})

    def submit(self, messages: list, scope: str, evidence: list[str]) -> None:
        """Queue extraction for the background worker (started on first use)."""
        if not self.options.learn:
            return
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="autoskill-learn", daemon=True)
                self._worker.start()
        self._jobs.put((messages, scope, evidence))

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                self.learn(*job)
            except Exception as exc:  # one bad conversation must not stop learning from the next
                self.errors.append(f"{type(exc).__name__}: {exc}")
                print(f"evolver-autoskill: extraction failed: {exc!r}\n{traceback.format_exc(limit=3)}",
                      file=sys.stderr)
            finally:
                self._jobs.task_done()

    def drain(self) -> None:
        """Wait until every queued extraction has been handled."""
        self._jobs.join()

    def close(self) -> None:
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join(timeout=60)
            self._worker = None


def learn_from_episodes(store, bank: SkillBank, embedder, episodes: list, min_score: float = 0.8,
                        options: AutoSkillOptions | None = None) -> dict[str, int]:
    """The second source: candidates from won *training* episodes, managed like conversation ones.
    Returns how many candidates were added, merged and discarded."""
    options = options or AutoSkillOptions()
    manager = Manager(bank, embedder, alpha=options.lam, eta=options.eta)
    extractor = RuleExtractor()
    counts: dict[str, int] = {}
    for ep in episodes:
        cand = extractor.from_episode(ep, min_score)
        if cand is None:
            continue
        d = manager.apply(cand)
        if store is not None:
            records.log_event(store, bank.scope, d.action, d.target or cand.card.name, d.version, d.commit,
                              cand.evidence, d.reason, {"by": d.by})
        counts[d.action] = counts.get(d.action, 0) + 1
    return counts
