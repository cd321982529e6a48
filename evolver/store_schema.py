"""The store's schema, as numbered migrations, and how episodes and steps map onto its columns.

Each migration is a function ``mNNN_name(con)``; its number is read from its name, so the list
below is the only registry. ``Store`` applies, in order and each in its own transaction, the ones
whose number is not yet in the ``migrations`` table. A migration, once released, is never edited:
a schema change is a new function appended here (old stores upgrade on their next writable open).

Plugins bring their own tables the same way (hook ``register_migrations``): their migrations are
numbered from 1 per plugin and recorded in ``plugin_migrations`` under the plugin's key.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from operator import attrgetter
from typing import Any, Callable

import numpy as np

# JSON columns use DuckDB's JSON type (text underneath) so `col->>'$.key'` works in `evolver traces`.
# No foreign keys: DuckDB checks them row by row, which would cost more than the bulk insert itself,
# and rows are only ever written by the Store, which keeps them consistent.

MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS migrations (
    id INTEGER PRIMARY KEY,
    name VARCHAR NOT NULL,
    applied_at TIMESTAMP NOT NULL
)"""
# A table of its own, not rows in `migrations`: an older evolver reads every id there as a core
# migration, and would take a plugin's number 3 for a core one it does not know.
PLUGIN_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS plugin_migrations (
    plugin VARCHAR NOT NULL,
    id INTEGER NOT NULL,
    name VARCHAR NOT NULL,
    applied_at TIMESTAMP NOT NULL,
    PRIMARY KEY (plugin, id)
)"""


def m001_initial(con) -> None:
    con.execute("""
    CREATE TABLE runs (
        run_id VARCHAR PRIMARY KEY,
        created_at TIMESTAMP NOT NULL,
        updated_at TIMESTAMP NOT NULL,
        status VARCHAR NOT NULL,
        benchmark VARCHAR,
        config JSON,
        summary JSON
    )""")
    # Keyed by (run_id, program_id): a program id is only promised unique within its run.
    con.execute("""
    CREATE TABLE programs (
        program_id VARCHAR NOT NULL,
        run_id VARCHAR NOT NULL,
        "commit" VARCHAR,
        program_hash VARCHAR,
        parent_id VARCHAR,
        operator VARCHAR,
        proposal_id VARCHAR,
        manifest JSON,
        created_at TIMESTAMP NOT NULL,
        PRIMARY KEY (run_id, program_id)
    )""")
    # Steps' token counts are also summed here so aggregates never need to touch `steps`.
    con.execute("""
    CREATE TABLE episodes (
        episode_id VARCHAR PRIMARY KEY,
        run_id VARCHAR,
        cache_key VARCHAR NOT NULL,
        program_id VARCHAR,
        program_hash VARCHAR,
        model VARCHAR,
        benchmark VARCHAR,
        task_id VARCHAR,
        split VARCHAR,
        category VARCHAR,
        seed BIGINT,
        purpose VARCHAR,
        score DOUBLE,
        won BOOLEAN,
        rewards JSON,
        prediction VARCHAR,
        gold JSON,
        error VARCHAR,
        n_steps INTEGER,
        prompt_tokens BIGINT,
        completion_tokens BIGINT,
        wall_s DOUBLE,
        model_s DOUBLE,
        created_at TIMESTAMP NOT NULL,
        task JSON
    )""")
    con.execute("CREATE INDEX episodes_cache_key ON episodes (cache_key)")
    con.execute("CREATE INDEX episodes_run_program ON episodes (run_id, program_id)")
    # The big text columns are zstd-compressed: on prompt-like text it is ~3x smaller than the
    # default (FSST) and the checkpoint that compresses them is ~2.5x faster, which halves the
    # amortised cost of ingesting steps; they are read one episode at a time, so slower scans of
    # these columns do not matter.
    # No key or index on steps: an ART index would double the cost of the 100k-row inserts, and
    # a scan of the narrow episode_id column answers a one-episode lookup in milliseconds.
    con.execute("""
    CREATE TABLE steps (
        episode_id VARCHAR NOT NULL,
        idx INTEGER NOT NULL,
        prompt VARCHAR USING COMPRESSION zstd,
        output VARCHAR USING COMPRESSION zstd,
        action VARCHAR,
        observation VARCHAR USING COMPRESSION zstd,
        reward DOUBLE,
        prompt_tokens INTEGER,
        completion_tokens INTEGER,
        tool_calls JSON,
        latency_s DOUBLE,
        error VARCHAR
    )""")
    con.execute("""
    CREATE TABLE proposals (
        proposal_id VARCHAR PRIMARY KEY,
        run_id VARCHAR,
        iteration INTEGER,
        proposer VARCHAR,
        operator VARCHAR,
        parent_id VARCHAR,
        candidate_id VARCHAR,
        hypothesis VARCHAR,
        detail JSON,
        status VARCHAR NOT NULL,
        reason VARCHAR,
        scores JSON,
        created_at TIMESTAMP NOT NULL,
        updated_at TIMESTAMP NOT NULL
    )""")
    con.execute("""
    CREATE TABLE evaluations (
        run_id VARCHAR,
        iteration INTEGER,
        program_id VARCHAR,
        split VARCHAR,
        score DOUBLE,
        success DOUBLE,
        n INTEGER,
        context_tokens DOUBLE,
        cost DOUBLE,
        per_category JSON,
        errors INTEGER,
        created_at TIMESTAMP NOT NULL
    )""")
    con.execute("""
    CREATE TABLE frontier_events (
        run_id VARCHAR,
        iteration INTEGER,
        program_id VARCHAR,
        event VARCHAR NOT NULL CHECK (event IN ('admit', 'evict', 'reject', 'seed')),
        metrics JSON,
        reason VARCHAR,
        created_at TIMESTAMP NOT NULL
    )""")
    con.execute("""
    CREATE TABLE iterations (
        run_id VARCHAR NOT NULL,
        iteration INTEGER NOT NULL,
        status VARCHAR NOT NULL CHECK (status IN ('started', 'finished')),
        parent_id VARCHAR,
        frontier JSON,
        summary JSON,
        started_at TIMESTAMP NOT NULL,
        finished_at TIMESTAMP,
        PRIMARY KEY (run_id, iteration)
    )""")
    con.execute("""
    CREATE TABLE train_steps (
        run_id VARCHAR,
        step INTEGER,
        metrics JSON,
        created_at TIMESTAMP NOT NULL
    )""")


def m002_autoskill(con) -> None:
    """Did create the AutoSkill plugin's tables; they are now that plugin's own migration 1
    (evolver_autoskill/schema.py), which creates them only where they are missing, so a store this
    migration filled keeps its rows. Kept as a no-op, not deleted: old stores record number 2, and a
    recorded number this list lacks reads as a store from a newer evolver."""


def m003_step_monitor(con) -> None:
    """The online monitor's verdict on a step (``Step.monitor``): NULL when it flagged nothing."""
    con.execute("ALTER TABLE steps ADD COLUMN monitor JSON")


def m004_judgements(con) -> None:
    """One row per group of episodes a judge ranked (``evolver.judge``): the episodes in the order of
    ``env_scores``, ``rewards`` and each pass's ``passes`` (scores 0..10 by episode; null: the reply could
    not be read), the passes' ``disagreement`` (Kendall distance), the error, and what the judge cost."""
    con.execute("""
    CREATE TABLE judgements (
        judgement_id VARCHAR PRIMARY KEY,
        run_id VARCHAR,
        benchmark VARCHAR,
        task_id VARCHAR,
        split VARCHAR,
        purpose VARCHAR,
        judge_model VARCHAR,
        episode_ids JSON,
        env_scores JSON,
        rewards JSON,
        passes JSON,
        disagreement DOUBLE,
        error VARCHAR,
        calls INTEGER,
        prompt_tokens BIGINT,
        completion_tokens BIGINT,
        prompt_chars BIGINT,
        replies JSON,
        created_at TIMESTAMP NOT NULL
    )""")


def m005_episode_uses(con) -> None:
    """Episodes a run took from the evaluation cache (stored by another run): without this row the run
    that used them could not find them under its own id."""
    con.execute("""
    CREATE TABLE episode_uses (
        run_id VARCHAR NOT NULL,
        episode_id VARCHAR NOT NULL,
        created_at TIMESTAMP NOT NULL,
        PRIMARY KEY (run_id, episode_id)
    )""")


MIGRATIONS: list[Callable] = [m001_initial, m002_autoskill, m003_step_monitor, m004_judgements, m005_episode_uses]

# How an Episode and its Steps become rows: (column, DuckDB type, staging kind, getter), in table
# order. Kinds: "s" text, "j" JSON text, "i" int64, "f" float64, "b" bool; a getter of None marks a
# value the Store supplies (already computed cache keys, the step's episode id, the batch's created_at). Getters are
# attrgetters where possible: they run per row of 100k-step batches.
_g = attrgetter
EPISODE_COLUMNS = [
    ("episode_id", "VARCHAR", "s", _g("id")), ("run_id", "VARCHAR", "s", _g("run_id")),
    ("cache_key", "VARCHAR", "s", None), ("program_id", "VARCHAR", "s", _g("program_id")),
    ("program_hash", "VARCHAR", "s", _g("program_hash")), ("model", "VARCHAR", "s", _g("model")),
    ("benchmark", "VARCHAR", "s", _g("task.benchmark")), ("task_id", "VARCHAR", "s", _g("task.id")),
    ("split", "VARCHAR", "s", _g("task.split")), ("category", "VARCHAR", "s", _g("task.category")),
    ("seed", "BIGINT", "i", _g("seed")), ("purpose", "VARCHAR", "s", _g("purpose")),
    ("score", "DOUBLE", "f", _g("score")), ("won", "BOOLEAN", "b", _g("won")),
    ("rewards", "JSON", "j", _g("rewards")), ("prediction", "VARCHAR", "s", _g("prediction")),
    ("gold", "JSON", "j", _g("task.gold")), ("error", "VARCHAR", "s", _g("error")),
    ("n_steps", "INTEGER", "i", lambda e: len(e.steps)),
    # Summed from the steps when they carry counts; else the episode's own totals (set by tally()).
    ("prompt_tokens", "BIGINT", "i", lambda e: sum(s.prompt_tokens or 0 for s in e.steps) or e.prompt_tokens),
    ("completion_tokens", "BIGINT", "i",
     lambda e: sum(s.completion_tokens or 0 for s in e.steps) or e.completion_tokens),
    ("wall_s", "DOUBLE", "f", _g("wall_s")), ("model_s", "DOUBLE", "f", _g("model_s")),
    ("created_at", "TIMESTAMP", "t", None),
    # A shallow dict: dataclasses.asdict deep-copies gold and meta, 20x slower for nothing.
    ("task", "JSON", "j", lambda e: {f.name: getattr(e.task, f.name) for f in dataclasses.fields(e.task)}),
]
STEP_COLUMNS = [
    ("episode_id", "VARCHAR", "s", None), ("idx", "INTEGER", "i", _g("index")),
    ("prompt", "VARCHAR", "s", _g("prompt")), ("output", "VARCHAR", "s", _g("output")),
    ("action", "VARCHAR", "s", _g("action")), ("observation", "VARCHAR", "s", _g("observation")),
    ("reward", "DOUBLE", "f", _g("reward")), ("prompt_tokens", "INTEGER", "i", _g("prompt_tokens")),
    ("completion_tokens", "INTEGER", "i", _g("completion_tokens")),
    ("tool_calls", "JSON", "j", _g("tool_calls")), ("latency_s", "DOUBLE", "f", _g("latency_s")),
    ("error", "VARCHAR", "s", _g("error")), ("monitor", "JSON", "j", _g("monitor")),
]


def _scrub(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _scrub(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_scrub(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    """JSON text that DuckDB's JSON type accepts: NaN/inf (invalid JSON) become null."""
    try:
        return json.dumps(obj, default=str, allow_nan=False)
    except ValueError:
        return json.dumps(_scrub(obj), default=str, allow_nan=False)


def _text(x: Any) -> str | None:
    if x is None:
        return None
    if not isinstance(x, str):
        x = dumps(x) if isinstance(x, (dict, list, tuple)) else str(x)
    # Lone surrogates (byte-level decoding of model output) cannot be encoded as UTF-8.
    return x.encode("utf-8", "replace").decode("utf-8")


def _num(x: Any, kind: type) -> Any:
    try:
        return kind(x)
    except (TypeError, ValueError, OverflowError):
        return kind(0) if kind is int else float("nan")


def stage(spec: list, items: list, supplied: dict[str, Any], clean: bool = False) -> dict[str, np.ndarray]:
    """Whole columns as numpy arrays, which DuckDB scans in one INSERT ... SELECT.

    ``clean`` converts value by value (non-str to text, broken unicode replaced, bad numbers to
    0/NaN): the slow path the Store retries with when the fast one rejected a batch.
    """
    # fromiter, not np.array: a column of equal-length lists must stay 1-D (and then fail the scan
    # and be cleaned), not silently become a 2-D array.
    obj = lambda xs: np.fromiter(xs, dtype=object, count=len(xs))  # noqa: E731
    out = {}
    for name, _, kind, get in spec:
        vals = supplied[name] if get is None else list(map(get, items))
        if kind == "s":
            # DuckDB would render a stray list or dict in its own non-JSON syntax: convert such columns.
            odd = clean or not all(v is None or type(v) is str for v in vals)
            out[name] = obj([_text(v) for v in vals] if odd else vals)
        elif kind == "j":
            # Most steps call no tool: skip json.dumps for empty lists, the costliest column to build.
            out[name] = obj(["[]" if v == [] else dumps(v) for v in vals])
        elif kind == "i":
            out[name] = np.array([_num(v, int) for v in vals] if clean else vals, dtype=np.int64)
        elif kind == "f":
            out[name] = np.array([_num(v, float) for v in vals] if clean else vals, dtype=np.float64)
        elif kind == "b":
            out[name] = np.array([bool(v) for v in vals], dtype=bool)
        else:  # "t": one timestamp for the whole batch
            out[name] = np.full(len(items), np.datetime64(vals, "us"))
    return out


def migration_id(fn: Callable) -> int:
    m = re.fullmatch(r"m(\d{3})_\w+", fn.__name__)
    if not m:
        raise ValueError(f"migration {fn.__name__!r} must be named mNNN_description")
    return int(m.group(1))
