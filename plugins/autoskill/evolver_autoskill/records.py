"""AutoSkill's rows in the run store (tables from the plugin's migrations, evolver_autoskill/schema.py):
retrievals with their decisions, per-skill usage, served conversations, bank events, and the usage
accounting built on them.

Writes go through ``Store.execute`` (the write path for plugin tables), reads through ``Store.query``;
both hold the store's lock, and DuckDB commits each statement.
"""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

from evolver import store_json
from evolver_autoskill.retrieval import Retrieval


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _rows(store, sql: str, params: list | None = None, json_cols: tuple = ()) -> list[dict]:
    cols, rows = store.query(sql, params or [])
    return [{c: (json.loads(v) if c in json_cols and v is not None else v) for c, v in zip(cols, r)} for r in rows]


def log_retrieval(store, scope: str, source: str, ref: str, retrieval: Retrieval) -> str:
    """One retrieval and a usage row per skill it scored; returns the retrieval id."""
    rid = uuid.uuid4().hex
    now = _now()
    store.execute("INSERT INTO autoskill_retrievals VALUES (?, ?, ?, ?, ?, ?::JSON, ?::JSON, ?, ?)",
                  [rid, scope, source, ref, retrieval.query, store_json(retrieval.names),
                   store_json(retrieval.decisions()), retrieval.latency_s, now])
    hits = retrieval.hits
    if hits:
        store.execute("INSERT INTO autoskill_usage SELECT ?, ?, ?, unnest(?::VARCHAR[]), unnest(?::BOOLEAN[]), "
                      "unnest(?::BOOLEAN[]), unnest(?::DOUBLE[]), ?",
                      [rid, scope, ref, [h.name for h in hits],
                       [h.decision in ("injected", "beyond_top_k", "always_on") for h in hits],
                       [h.decision in ("injected", "always_on") for h in hits], [h.rel for h in hits], now])
    return rid


def log_conversation(store, conversation_id: str, thread_id: str, scope: str, model: str, messages: list,
                     response: str, query: str, injected: list[str], latency_s: float) -> None:
    store.execute("INSERT INTO autoskill_conversations VALUES (?, ?, ?, ?, ?::JSON, ?, ?, ?::JSON, ?, NULL, ?)",
                  [conversation_id, thread_id, scope, model, store_json(messages), response, query,
                   store_json(injected), latency_s, _now()])


def set_feedback(store, conversation_id: str, score: float, scopes: list[str] | None = None) -> bool:
    """A user's (or a grader's) score for one served answer: the outcome usage accounting compares.
    ``scopes``: only a conversation of these scopes is touched (an API key's; None: any)."""
    rows = store.execute("UPDATE autoskill_conversations SET feedback = ? WHERE conversation_id = ? "
                         "AND (? OR list_contains(?::VARCHAR[], scope)) RETURNING 1",
                         [float(score), conversation_id, scopes is None, scopes])
    return bool(rows)


def conversations(store, scope: str | None = None) -> list[dict]:
    return _rows(store, "SELECT * FROM autoskill_conversations WHERE (? IS NULL OR scope = ?) "
                        "ORDER BY created_at, rowid", [scope, scope], ("messages", "injected"))


def retrievals(store, scope: str | None = None) -> list[dict]:
    return _rows(store, "SELECT * FROM autoskill_retrievals WHERE (? IS NULL OR scope = ?) ORDER BY created_at, rowid",
                 [scope, scope], ("injected", "decisions"))


def log_event(store, scope: str, action: str, skill: str | None, version: str | None, commit: str | None,
              evidence: list[str], reason: str, detail: dict | None = None) -> None:
    store.execute("INSERT INTO autoskill_events VALUES (?, ?, ?, ?, ?, ?::JSON, ?, ?::JSON, ?)",
                  [scope, action, skill, version, commit, store_json(list(evidence)), reason,
                   store_json(detail or {}), _now()])


def events(store, scope: str | None = None) -> list[dict]:
    return _rows(store, "SELECT * FROM autoskill_events WHERE (? IS NULL OR scope = ?) ORDER BY created_at, rowid",
                 [scope, scope], ("evidence", "detail"))


# An outcome per ref: a served conversation's feedback, or a run episode's score. Run refs are
# "<run_id>/<program_id>/<task_id>" (what the select_skills hook knows before the episode exists).
_OUTCOMES = """
    SELECT conversation_id AS ref, feedback AS score FROM autoskill_conversations WHERE feedback IS NOT NULL
    UNION ALL
    SELECT run_id || '/' || program_id || '/' || task_id AS ref, avg(score) AS score FROM episodes
    WHERE error IS NULL GROUP BY ALL
"""


def usage(store, scope: str) -> list[dict]:
    """Per skill of a scope: times retrieved and injected, and the mean outcome of the refs it was
    injected into versus the scope's other scored refs (the with/without comparison)."""
    sql = f"""
    WITH outcomes AS ({_OUTCOMES}),
    scored AS (SELECT DISTINCT r.ref, o.score FROM autoskill_retrievals r JOIN outcomes o USING (ref)
               WHERE r.scope = $1),
    per_skill AS (SELECT skill, count(*) FILTER (WHERE retrieved) AS retrieved,
                         count(*) FILTER (WHERE injected) AS injected,
                         list(DISTINCT ref) FILTER (WHERE injected) AS refs
                  FROM autoskill_usage WHERE scope = $1 GROUP BY skill)
    SELECT p.skill, p.retrieved, p.injected,
           (SELECT count(*) FROM scored s WHERE list_contains(p.refs, s.ref)) AS with_n,
           (SELECT avg(score) FROM scored s WHERE list_contains(p.refs, s.ref)) AS with_score,
           (SELECT count(*) FROM scored s WHERE NOT list_contains(coalesce(p.refs, []), s.ref)) AS without_n,
           (SELECT avg(score) FROM scored s WHERE NOT list_contains(coalesce(p.refs, []), s.ref)) AS without_score
    FROM per_skill p ORDER BY p.skill"""
    return _rows(store, sql, [scope])
