"""A run read from the store into plain rows: what the report's plots and tables draw. Nothing here
draws; the ``evolver ui`` server can serve the same rows.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from evolver import ReportContext

SEED_ID = "seed"  # the loop's seed program id
#: How much of one diff the page shows: a checkpoint or a rewritten harness can be megabytes.
DIFF_CHARS = 20_000


@dataclass
class Candidate:
    """One proposal. ``status``: admitted, discarded or rejected; ``dev``: its dev score (None when it was
    rejected before playing); ``probe``: True when ``dev`` is the probe's score only (stopped early)."""

    id: str
    parent: str
    iteration: int
    proposer: str
    operator: str
    status: str
    dev: float | None
    probe: bool
    hypothesis: str
    reason: str


@dataclass
class RunData:
    run_id: str
    summary: dict
    seed_dev: float | None
    candidates: list[Candidate]
    #: program id -> its dev metrics (score, success, context_tokens, cost, ...), the last full evaluation
    dev_metrics: dict[str, dict]
    #: the frontier at the end: member ids, in order
    members: list[str]
    #: training run id -> its train_steps rows (metrics with ``step``), in step order
    training: dict[str, list[dict]] = field(default_factory=dict)
    #: (candidate, its diff from its parent) for each admitted candidate
    diffs: list[tuple[Candidate, str]] = field(default_factory=list)

    @property
    def objectives(self) -> list[str]:
        return list((self.summary.get("frontier") or {}).get("objectives") or ["score:max"])

    @property
    def ever_admitted(self) -> set[str]:
        return {c.id for c in self.candidates if c.status == "admitted"}


def collect(report: ReportContext) -> RunData:
    """Read ``report.run_id``'s programs, proposals, dev evaluations, frontier and training steps."""
    store, run_id, summary = report.store, report.run_id, report.summary
    candidates = [_candidate(r) for r in store.proposals(run_id) if r.get("candidate_id")]
    dev = {}
    for row in store.evaluations(run_id, split="dev"):  # oldest first: the last full one wins
        dev[row["program_id"]] = {k: row[k] for k in ("score", "success", "context_tokens", "cost")}
    for r in store.proposals(run_id):  # candidates stopped after the probe have their scores here only
        scores = {k: v for k, v in (r.get("scores") or {}).items() if isinstance(v, (int, float))}
        if r.get("candidate_id") and r["candidate_id"] not in dev and "score" in scores:
            dev[r["candidate_id"]] = scores
    members = [m["program_id"] for m in (summary.get("frontier") or {}).get("members", [])]
    for m in (summary.get("frontier") or {}).get("members", []):
        dev.setdefault(m["program_id"], dict(m.get("metrics") or {}))
    seed_dev = (dev.get(SEED_ID) or {}).get("score")
    data = RunData(run_id, summary, seed_dev, candidates, dev, members, training(store, run_id))
    commits = {p["program_id"]: p.get("commit") for p in store.programs(run_id)}
    for c in candidates:
        if c.status == "admitted":
            text = report.repo.diff(commits.get(c.parent) or c.parent, commits.get(c.id) or c.id)
            cut = len(text) > DIFF_CHARS
            data.diffs.append((c, text[:DIFF_CHARS] + (f"\n... ({len(text) - DIFF_CHARS} more characters: "
                                                       f"evolver programs diff {c.parent} {c.id})" if cut else "")))
    return data


def _candidate(r: dict) -> Candidate:
    scores = r.get("scores") or {}
    dev = scores.get("score", scores.get("probe_score"))
    return Candidate(id=r["candidate_id"], parent=r.get("parent_id") or SEED_ID, iteration=int(r.get("iteration") or 0),
                     proposer=r.get("proposer") or "", operator=r.get("operator") or "", status=r["status"],
                     dev=None if dev is None else float(dev), probe="score" not in scores and dev is not None,
                     hypothesis=r.get("hypothesis") or "", reason=(r.get("reason") or "").strip())


def training(store, run_id: str) -> dict[str, list[dict]]:
    """The train_steps of the run and of the training runs it started (``RUN-<operator>-it<N>``)."""
    _, rows = store.query("SELECT run_id, step, metrics FROM train_steps WHERE run_id = ? OR starts_with(run_id, ?) "
                          "ORDER BY run_id, step", [run_id, f"{run_id}-"])
    out: dict[str, list[dict]] = {}
    for rid, step, metrics in rows:
        m = json.loads(metrics) if isinstance(metrics, str) else dict(metrics or {})
        out.setdefault(rid, []).append({**m, "step": step})
    return out
