"""The one DuckDB file that records everything: runs, programs, episodes and their steps,
proposals, evaluations, frontier events, iterations, trainer steps and judgements (judge-scored tasks).

DuckDB admits one process per file (a writer locks out even readers), so a run's orchestrator is
the only writer and workers hand it their episodes. Every ``add_*``/``update_*`` commits before it
returns: a process killed with SIGKILL loses nothing it had already added.
"""
from __future__ import annotations

import dataclasses
import json
import re
import threading
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import wraps
from pathlib import Path
from typing import Any

import duckdb

from evolver import plugins, store_schema
from evolver.errors import EvolverError, QueryError, StoreIOError, StoreLockedError
from evolver.store_schema import dumps
from evolver.types import Episode, Evaluation, Step, Task

JSON_COLUMNS = {"config", "summary", "manifest", "detail", "scores", "metrics", "frontier",
                "per_category", "rewards", "gold", "task", "tool_calls", "episode_ids", "env_scores", "passes",
                "replies"}
FRONTIER_EVENTS = ("admit", "evict", "reject", "seed")
_EP_SELECT = ("episode_id, run_id, program_id, program_hash, model, seed, purpose, score, won, rewards, "
              "prediction, error, wall_s, model_s, task, prompt_tokens, completion_tokens")
_STEP_SELECT = ("episode_id, idx, prompt, output, action, observation, reward, prompt_tokens, "
                "completion_tokens, tool_calls, latency_s, error, monitor")


class StoreLookupError(EvolverError, LookupError):
    """No such (or an ambiguous) run, episode, program or proposal."""




_DISK_FULL = ("no space left on device", "file too large", "disk quota exceeded")
_DAMAGED = ("corrupt", "not a valid duckdb database", "checksum", "invalid database", "serialization error",
            "failed to read", "could not read enough bytes")


def _io_error(path: Path, exc: BaseException) -> StoreIOError | None:
    """A DuckDB error that means a full disk or a damaged file, as a message that says what to do; None
    for any other error (a bug, or the caller's SQL), which stays as it is."""
    msg = " ".join(str(exc).split())
    low = msg.lower()
    if any(s in low for s in _DISK_FULL):
        return StoreIOError(f"cannot write the store {path}: the disk is full or over a quota ({msg[:300]}). "
                            "Free space there (or choose a --store on a bigger disk); what was recorded before "
                            "stays, and `evolver run --resume` continues a run where it stopped")
    if any(s in low for s in _DAMAGED):
        return StoreIOError(f"the store {path} is damaged and cannot be read ({msg[:300]}). Restore it from a "
                            f"backup, or move it aside (mv {path} {path}.damaged, and its .wal file if there is "
                            "one) to start a new store; the programs/ repository beside it is separate")
    return None


def _now() -> datetime:
    # Naive UTC: TIMESTAMP (not TIMESTAMPTZ) columns round-trip without a time-zone database.
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _locked(fn):
    # One DuckDB connection is not safe to use from several threads at once; the orchestrator may
    # call the store from worker threads, so every public method holds the store's lock.
    @wraps(fn)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            if self._con is None:
                raise EvolverError(f"the store {self.path} is closed")
            try:
                return fn(self, *args, **kwargs)
            except duckdb.Error as exc:
                clear = _io_error(self.path, exc)
                if clear is None:
                    raise
                raise clear from exc
    return wrapper


class Store:
    """The trace store. Open one per process (``with Store(path) as store:``); writers commit per
    call. Rows come back as dicts with JSON columns decoded, oldest first unless said otherwise."""

    def __init__(self, path: str | Path, read_only: bool = False):
        self.path = Path(path).expanduser().resolve()
        self.read_only = read_only
        self._lock = threading.RLock()
        if read_only and not self.path.exists():
            raise EvolverError(f"no store at {self.path}: nothing has been recorded there yet "
                               "(check --store, or start a run first)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._con = self._connect()
        try:
            self._migrate()
        except BaseException as exc:
            self._con.close()
            clear = _io_error(self.path, exc) if isinstance(exc, duckdb.Error) else None
            if clear is not None:
                raise clear from exc
            raise

    def _connect(self) -> duckdb.DuckDBPyConnection:
        try:
            if self.read_only:  # a reader (`evolver traces`, reports) needs no file but this one
                return duckdb.connect(str(self.path), read_only=True,
                                      config={"enable_external_access": False, "lock_configuration": True})
            return duckdb.connect(str(self.path))
        except duckdb.IOException as e:
            msg = str(e)
            if "lock" not in msg.lower():
                clear = _io_error(self.path, e)
                if clear is None:
                    raise
                raise clear from e
            m = re.search(r"held in (.*?) \(PID (\d+)\)", msg)
            who = f"another process (PID {m.group(2)}, {m.group(1)})" if m else "another process"
            stop = f"stop it (kill {m.group(2)})" if m else "stop it"
            raise StoreLockedError(
                f"the store {self.path} is in use by {who}, most likely another evolver run or "
                f"`evolver traces`; DuckDB lets only one process open the file at a time. "
                f"Wait for it to finish, or {stop}; or use a different --store.") from None
        except duckdb.ConnectionException as e:
            raise StoreLockedError(
                f"the store {self.path} is already open in this process with read_only="
                f"{not self.read_only}; close that Store first ({e})") from None
        except duckdb.Error as e:  # a damaged file (checksum, WAL) or a full disk: say which and what to do
            clear = _io_error(self.path, e)
            if clear is None:
                raise
            raise clear from e

    def _migrate(self) -> None:
        """The core migrations, then those of every loaded plugin (hook ``register_migrations``)."""
        has = {r[0] for r in self._con.execute("SELECT table_name FROM information_schema.tables WHERE "
                                               "table_name IN ('migrations', 'plugin_migrations')").fetchall()}
        if not self.read_only:
            self._con.execute(store_schema.MIGRATIONS_TABLE)
            self._con.execute(store_schema.PLUGIN_MIGRATIONS_TABLE)
            has = {"migrations", "plugin_migrations"}
        core = {r[0] for r in self._con.execute("SELECT id FROM migrations").fetchall()} if (
            "migrations" in has) else set()
        self._apply(store_schema.MIGRATIONS, core, "evolver", "INSERT INTO migrations VALUES (?, ?, ?)")
        recorded = self._con.execute("SELECT plugin, id FROM plugin_migrations").fetchall() if (
            "plugin_migrations" in has) else []
        for plugin, migrations in sorted(plugins.migrations().items()):
            self._apply(migrations, {i for p, i in recorded if p == plugin}, f"the plugin {plugin!r}",
                        "INSERT INTO plugin_migrations VALUES (?, ?, ?, ?)", (plugin,))

    def _apply(self, migrations: list, applied: set[int], owner: str, record: str, key: tuple = ()) -> None:
        """Apply ``owner``'s migrations whose number is not in ``applied``, in order, each with its record."""
        migrations = sorted(migrations, key=store_schema.migration_id)
        ids = [store_schema.migration_id(fn) for fn in migrations]
        if len(set(ids)) != len(ids):
            raise EvolverError(f"duplicate migration numbers in {owner}'s migrations: {ids}")
        unknown = applied - set(ids)
        if unknown:
            raise EvolverError(f"the store {self.path} has migrations {sorted(unknown)} of {owner} that this "
                               f"version does not know: it was written by a newer version; upgrade {owner}")
        pending = [(i, fn) for i, fn in zip(ids, migrations) if i not in applied]
        if pending and self.read_only:
            raise EvolverError(f"the store {self.path} needs schema migrations {[i for i, _ in pending]} of "
                               f"{owner}; open it once for writing (any evolver command that records) to upgrade it")
        for i, fn in pending:
            # Each migration and its record commit together: a crash leaves it wholly applied or not.
            with self._tx():
                fn(self._con)
                self._con.execute(record, [*key, i, fn.__name__, _now()])

    # -- plumbing ------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def _tx(self):
        self._con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        self._con.execute("COMMIT")

    def _dicts(self, sql: str, params: list | None = None) -> list[dict]:
        cur = self._con.execute(sql, params or [])
        cols = [d[0] for d in cur.description]
        return [{c: (_loads(v) if c in JSON_COLUMNS else v) for c, v in zip(cols, row)}
                for row in cur.fetchall()]

    def _update(self, what: str, sql: str, params: list) -> None:
        if not self._con.execute(sql + " RETURNING 1", params).fetchall():
            raise StoreLookupError(f"no {what} in {self.path}")

    # -- episodes ------------------------------------------------------------------------------

    @_locked
    def add_episodes(self, episodes: list[Episode]) -> int:
        """Insert episodes and all their steps in one transaction; return how many were new.

        An episode is skipped (with its steps) when the store already holds one with the same
        ``(run_id, cache_key, purpose)``, or one with its ``id``; within one call the first of such
        duplicates wins. So re-adding after a resume never duplicates rows, but two rollouts of
        one task in one run need different seeds to both be kept. An episode without an id gets
        a uuid4 hex (set on the object); a skipped one without an id gets the stored row's id.
        """
        if not episodes:
            return 0
        keys = [e.cache_key for e in episodes]
        found = self._con.execute(
            "SELECT episode_id, run_id, cache_key, purpose FROM episodes "
            "WHERE cache_key IN (SELECT unnest($1::VARCHAR[])) OR episode_id IN (SELECT unnest($2::VARCHAR[]))",
            [keys, [e.id for e in episodes if e.id]]).fetchall()
        have_ids = {r[0] for r in found}
        have = {(r[1], r[2], r[3]): r[0] for r in found}
        new, new_keys = [], []
        for e, key in zip(episodes, keys):
            slot = (e.run_id, key, e.purpose)
            if e.id in have_ids or slot in have:
                e.id = e.id or have[slot]
                continue
            e.id = e.id or uuid.uuid4().hex
            have[slot] = e.id
            have_ids.add(e.id)
            new.append(e)
            new_keys.append(key)
        if not new:
            return 0
        try:
            self._insert_episodes(new, new_keys, clean=False)
        except (duckdb.Error, TypeError, ValueError, OverflowError):
            # A stray non-str value or an unencodable surrogate: redo the batch value by value.
            self._insert_episodes(new, new_keys, clean=True)
        return len(new)

    def _insert_episodes(self, new: list[Episode], keys: list[str], clean: bool) -> None:
        # Numpy columns scanned by DuckDB in one INSERT ... SELECT per table: ~0.6 s per 100k
        # steps here, against ~70 s for executemany and ~1.7 s through a read_json file.
        steps = [s for e in new for s in e.steps]
        ep = store_schema.stage(store_schema.EPISODE_COLUMNS, new, {"created_at": _now(), "cache_key": keys}, clean)
        st = store_schema.stage(store_schema.STEP_COLUMNS, steps,
                                {"episode_id": [e.id for e in new for _ in e.steps]}, clean)
        with self._tx():
            self._bulk("episodes", store_schema.EPISODE_COLUMNS, ep)
            if steps:
                self._bulk("steps", store_schema.STEP_COLUMNS, st)

    def _bulk(self, table: str, spec: list[tuple], columns: dict) -> None:
        view = f"_evolver_stage_{table}"
        self._con.register(view, columns)
        try:
            # Explicit casts: an all-None object column is typed NULL by the scan, text -> JSON validates.
            sel = ", ".join(f'CAST("{name}" AS {typ})' for name, typ, _, _ in spec)
            self._con.execute(f"INSERT INTO {table} SELECT {sel} FROM {view}")
        finally:
            self._con.unregister(view)

    def _episode(self, row: tuple, cached: bool = False) -> Episode:
        (eid, run_id, program_id, program_hash, model, seed, purpose, score, won, rewards, prediction,
         error, wall_s, model_s, task, ptok, ctok) = row
        td = json.loads(task)
        names = {fl.name for fl in dataclasses.fields(Task)}
        return Episode(task=Task(**{k: v for k, v in td.items() if k in names}), program_id=program_id,
                       program_hash=program_hash, model=model, seed=seed, score=score, won=won,
                       rewards=_loads(rewards) or {}, prediction=prediction, error=error, wall_s=wall_s,
                       model_s=model_s, id=eid, run_id=run_id, purpose=purpose, cached=cached,
                       prompt_tokens=ptok, completion_tokens=ctok)

    def _attach_steps(self, eps: list[Episode]) -> None:
        by_id = {e.id: e for e in eps}
        rows = self._con.execute(
            f"SELECT {_STEP_SELECT} FROM steps WHERE episode_id IN (SELECT unnest($1::VARCHAR[])) "
            "ORDER BY episode_id, idx", [list(by_id)]).fetchall()
        for eid, idx, prompt, output, action, obs, reward, ptok, ctok, tools, lat, err, verdict in rows:
            by_id[eid].steps.append(Step(index=idx, prompt=prompt, output=output, action=action,
                                         observation=obs, reward=reward, prompt_tokens=ptok,
                                         completion_tokens=ctok, tool_calls=_loads(tools) or [],
                                         latency_s=lat, error=err, monitor=_loads(verdict)))

    @_locked
    def add_uses(self, run_id: str, episodes: list[Episode]) -> None:
        """Record that run ``run_id`` used ``episodes`` from the cache; those another run stored are then
        among its episodes (:meth:`episodes`). Its own, and a use already recorded, are skipped."""
        ids = sorted({e.id for e in episodes if e.id and e.run_id != run_id})
        if not run_id or not ids:
            return
        self._con.execute("INSERT INTO episode_uses SELECT ?, u.id, ? FROM (SELECT unnest(?::VARCHAR[]) AS id) u "
                          "ON CONFLICT DO NOTHING", [run_id, _now(), ids])

    @_locked
    def cached(self, keys: list[str], purpose: str | None = None) -> dict[str, Episode]:
        """The evaluation cache: one stored episode per found key, from any run, steps not loaded.

        Among several episodes with a key, one without an error wins, then the newest. ``purpose``
        restricts the lookup (e.g. to "eval", so sampled training rollouts are not reused).
        """
        if not keys:
            return {}
        sql = (f"SELECT cache_key, {_EP_SELECT} FROM episodes WHERE cache_key IN (SELECT unnest($1::VARCHAR[]))"
               + (" AND purpose = $2" if purpose is not None else "")
               + " QUALIFY row_number() OVER (PARTITION BY cache_key "
                 "ORDER BY error IS NULL DESC, created_at DESC, rowid DESC) = 1")
        params = [list(keys)] + ([purpose] if purpose is not None else [])
        return {row[0]: self._episode(row[1:], cached=True) for row in self._con.execute(sql, params).fetchall()}

    @_locked
    def episodes(self, run_id: str | None = None, program_id: str | None = None, split: str | None = None,
                 purpose: str | None = None, max_score: float | None = None, min_score: float | None = None,
                 limit: int | None = None, with_steps: bool = False,
                 ids: list[str] | None = None) -> list[Episode]:
        """Episodes in insertion order, filtered by every argument given; score bounds are inclusive. A
        run's episodes (``run_id``) are those it stored and those it took from the cache (:meth:`add_uses`)."""
        where, params = [], []
        if ids is not None:
            where.append("episode_id IN (SELECT unnest(?::VARCHAR[]))")
            params.append(list(ids))
        if run_id is not None:
            where.append("(run_id = ? OR episode_id IN (SELECT episode_id FROM episode_uses WHERE run_id = ?))")
            params += [run_id, run_id]
        for col, op, val in (("program_id", "=", program_id), ("split", "=", split),
                             ("purpose", "=", purpose), ("score", "<=", max_score), ("score", ">=", min_score)):
            if val is not None:
                where.append(f"{col} {op} ?")
                params.append(val)
        sql = f"SELECT {_EP_SELECT} FROM episodes"
        sql += (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY created_at, rowid"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        eps = [self._episode(r) for r in self._con.execute(sql, params).fetchall()]
        if with_steps and eps:
            self._attach_steps(eps)
        return eps

    @_locked
    def episode(self, episode_id: str) -> Episode:
        """One episode with its steps; a unique prefix of its id is enough (like a short git sha)."""
        rows = self._con.execute(f"SELECT {_EP_SELECT} FROM episodes WHERE starts_with(episode_id, ?) "
                                 "ORDER BY episode_id LIMIT 11", [episode_id]).fetchall()
        exact = [r for r in rows if r[0] == episode_id]
        if exact:
            rows = exact
        if not rows:
            raise StoreLookupError(f"no episode with id {episode_id!r} in {self.path}")
        if len(rows) > 1:
            more = ", ..." if len(rows) > 10 else ""
            raise StoreLookupError(f"episode id {episode_id!r} is ambiguous: it starts "
                                   f"{', '.join(r[0] for r in rows[:10])}{more}; give more characters")
        ep = self._episode(rows[0])
        self._attach_steps([ep])
        return ep

    # -- runs, programs, proposals -------------------------------------------------------------

    @_locked
    def create_run(self, run_id: str, benchmark: str, config: dict) -> None:
        now = _now()
        try:
            self._con.execute("INSERT INTO runs VALUES (?, ?, ?, 'running', ?, ?, NULL)",
                              [run_id, now, now, benchmark, dumps(config)])
        except duckdb.ConstraintException:
            raise EvolverError(f"run {run_id!r} already exists in {self.path}; resume it or pick another id") from None

    @_locked
    def get_run(self, run_id: str) -> dict | None:
        rows = self._dicts("SELECT * FROM runs WHERE run_id = ?", [run_id])
        return rows[0] if rows else None

    @_locked
    def update_run(self, run_id: str, status: str | None = None, summary: dict | None = None,
                   config: dict | None = None) -> None:
        """Set the status and/or replace the summary or the config (None leaves a field as it is)."""
        self._update(f"run {run_id!r}", "UPDATE runs SET updated_at = ?, status = coalesce(?, status), "
                     "summary = coalesce(?::JSON, summary), config = coalesce(?::JSON, config) WHERE run_id = ?",
                     [_now(), status, None if summary is None else dumps(summary),
                      None if config is None else dumps(config), run_id])

    @_locked
    def latest_run(self, status: str | tuple[str, ...] | None = None, prefix: str = "",
                   pattern: str = ".*") -> dict | None:
        """The newest run (with that status or one of those statuses, that id prefix and an id fully
        matching the regular expression ``pattern``, when given)."""
        statuses = [status] if isinstance(status, str) else list(status or [])
        rows = self._dicts("SELECT * FROM runs WHERE (len($1::VARCHAR[]) = 0 OR list_contains($1, status)) "
                           "AND starts_with(run_id, $2) AND regexp_full_match(run_id, $3) "
                           "ORDER BY created_at DESC, rowid DESC LIMIT 1", [statuses, prefix, pattern])
        return rows[0] if rows else None

    @_locked
    def add_program(self, program_id: str, run_id: str, commit: str, program_hash: str, parent_id: str | None,
                    operator: str | None, proposal_id: str | None, manifest: dict) -> None:
        """Record a program; re-adding (run_id, program_id) keeps the first row (resume-safe)."""
        self._con.execute("INSERT OR IGNORE INTO programs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                          [program_id, run_id, commit, program_hash, parent_id, operator, proposal_id,
                           dumps(manifest), _now()])

    @_locked
    def update_program_commit(self, program_id: str, commit: str, manifest: dict, run_id: str | None = None) -> None:
        self._update(f"program {program_id!r}", 'UPDATE programs SET "commit" = ?, manifest = ?::JSON '
                     "WHERE program_id = ? AND (? IS NULL OR run_id = ?)",
                     [commit, dumps(manifest), program_id, run_id, run_id])

    @_locked
    def get_program(self, program_id: str, run_id: str | None = None) -> dict | None:
        """The program row (the newest one if several runs used this id and run_id is not given)."""
        rows = self._dicts("SELECT * FROM programs WHERE program_id = ? AND (? IS NULL OR run_id = ?) "
                           "ORDER BY created_at DESC, rowid DESC LIMIT 1", [program_id, run_id, run_id])
        return rows[0] if rows else None

    @_locked
    def programs(self, run_id: str) -> list[dict]:
        return self._dicts("SELECT * FROM programs WHERE run_id = ? ORDER BY created_at, rowid", [run_id])

    @_locked
    def add_proposal(self, proposal_id: str, run_id: str, iteration: int, proposer: str, operator: str,
                     parent_id: str | None, candidate_id: str | None, hypothesis: str, detail: dict) -> None:
        """Record a proposal with status 'proposed'; re-adding an id keeps the first row."""
        now = _now()
        self._con.execute("INSERT OR IGNORE INTO proposals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'proposed', '', "
                          "NULL, ?, ?)", [proposal_id, run_id, iteration, proposer, operator, parent_id,
                                          candidate_id, hypothesis, dumps(detail), now, now])

    @_locked
    def update_proposal(self, proposal_id: str, status: str, reason: str = "", scores: dict | None = None,
                        detail: dict | None = None) -> None:
        """Set status and reason; scores and detail replace the stored ones when given."""
        self._update(f"proposal {proposal_id!r}", "UPDATE proposals SET status = ?, reason = ?, "
                     "scores = coalesce(?::JSON, scores), detail = coalesce(?::JSON, detail), updated_at = ? "
                     "WHERE proposal_id = ?",
                     [status, reason, None if scores is None else dumps(scores),
                      None if detail is None else dumps(detail), _now(), proposal_id])

    @_locked
    def proposals(self, run_id: str | None = None) -> list[dict]:
        return self._dicts("SELECT * FROM proposals WHERE (? IS NULL OR run_id = ?) ORDER BY created_at, rowid",
                           [run_id, run_id])

    @_locked
    def monitor_counts(self, run_id: str) -> dict[str, dict[str, int]]:
        """Per program, the steps of this run's episodes that the online monitor flagged, confirmed
        and blocked (``steps.monitor``)."""
        rows = self._con.execute(
            "SELECT e.program_id, count(*), count(*) FILTER (WHERE s.monitor->>'confirmed' = 'true'), "
            "count(*) FILTER (WHERE s.monitor->>'blocked' = 'true') FROM steps s JOIN episodes e USING (episode_id) "
            "WHERE e.run_id = ? AND s.monitor IS NOT NULL AND s.monitor::VARCHAR <> 'null' "
            "GROUP BY e.program_id ORDER BY e.program_id", [run_id]).fetchall()
        return {pid: {"flagged": f, "confirmed": c, "blocked": b} for pid, f, c, b in rows}

    @_locked
    def add_judgements(self, run_id: str, rows: list[dict]) -> None:
        """Record groups a judge ranked (``evolver.judge.Judgement.row``), one transaction."""
        cols = ("benchmark", "task_id", "split", "purpose", "judge_model", "episode_ids", "env_scores", "rewards",
                "passes", "disagreement", "error", "calls", "prompt_tokens", "completion_tokens", "prompt_chars",
                "replies")
        if not rows:
            return
        now = _now()
        with self._tx():
            self._con.executemany(f"INSERT INTO judgements VALUES (?, ?, {', '.join('?' * len(cols))}, ?)",
                                  [[uuid.uuid4().hex, run_id,
                                    *(dumps(r[c]) if c in JSON_COLUMNS else r[c] for c in cols), now] for r in rows])

    @_locked
    def judgements(self, run_id: str | None = None) -> list[dict]:
        """The judge's verdicts (a run's, or all), oldest first."""
        return self._dicts("SELECT * FROM judgements WHERE (? IS NULL OR run_id = ?) ORDER BY created_at, rowid",
                           [run_id, run_id])

    # -- evaluations, frontier, iterations, training -------------------------------------------

    @_locked
    def add_evaluation(self, run_id: str, iteration: int, evaluation: Evaluation) -> None:
        ev = evaluation
        self._con.execute("INSERT INTO evaluations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                          [run_id, iteration, ev.program_id, ev.split, ev.score, ev.success, ev.n,
                           ev.context_tokens, ev.cost, dumps(ev.per_category), ev.errors, _now()])

    @_locked
    def evaluations(self, run_id: str, program_id: str | None = None, split: str | None = None) -> list[dict]:
        """Rows with Evaluation's fields plus run_id, iteration, created_at; oldest first."""
        return self._dicts("SELECT * FROM evaluations WHERE run_id = ? AND (? IS NULL OR program_id = ?) "
                           "AND (? IS NULL OR split = ?) ORDER BY created_at, rowid",
                           [run_id, program_id, program_id, split, split])

    @_locked
    def add_frontier_event(self, run_id: str, iteration: int, program_id: str, event: str, metrics: dict,
                           reason: str = "") -> None:
        if event not in FRONTIER_EVENTS:
            raise ValueError(f"frontier event must be one of {FRONTIER_EVENTS}, not {event!r}")
        self._con.execute("INSERT INTO frontier_events VALUES (?, ?, ?, ?, ?, ?, ?)",
                          [run_id, iteration, program_id, event, dumps(metrics), reason, _now()])

    @_locked
    def frontier_events(self, run_id: str) -> list[dict]:
        return self._dicts("SELECT * FROM frontier_events WHERE run_id = ? ORDER BY created_at, rowid", [run_id])

    @_locked
    def start_iteration(self, run_id: str, iteration: int, parent_id: str | None) -> None:
        """Mark an iteration started; restarting one (after a crash) resets its row."""
        self._con.execute("INSERT OR REPLACE INTO iterations VALUES (?, ?, 'started', ?, NULL, NULL, ?, NULL)",
                          [run_id, iteration, parent_id, _now()])

    @_locked
    def finish_iteration(self, run_id: str, iteration: int, frontier: list[str], summary: dict) -> None:
        now = _now()
        self._con.execute(
            "INSERT INTO iterations VALUES (?, ?, 'finished', NULL, ?, ?, ?, ?) ON CONFLICT (run_id, iteration) "
            "DO UPDATE SET status = 'finished', frontier = excluded.frontier, summary = excluded.summary, "
            "finished_at = excluded.finished_at", [run_id, iteration, dumps(frontier), dumps(summary), now, now])

    @_locked
    def last_finished_iteration(self, run_id: str) -> int:
        return self._con.execute("SELECT coalesce(max(iteration), -1) FROM iterations "
                                 "WHERE run_id = ? AND status = 'finished'", [run_id]).fetchone()[0]

    @_locked
    def iterations(self, run_id: str) -> list[dict]:
        return self._dicts("SELECT * FROM iterations WHERE run_id = ? ORDER BY iteration", [run_id])

    @_locked
    def add_train_steps(self, run_id: str, rows: list[dict]) -> None:
        """Each row holds 'step' and any metrics; the metrics go to the JSON column."""
        if not rows:
            return
        self._con.execute("INSERT INTO train_steps SELECT ?, unnest(?::INTEGER[]), unnest(?::VARCHAR[])::JSON, ?",
                          [run_id, [int(r["step"]) for r in rows],
                           [dumps({k: v for k, v in r.items() if k != "step"}) for r in rows], _now()])

    @_locked
    def delete_train_steps(self, run_id: str, after: int) -> None:
        """Forget a run's training steps after ``after`` (a resumed run replays them)."""
        self._con.execute("DELETE FROM train_steps WHERE run_id = ? AND step > ?", [run_id, int(after)])

    @_locked
    def execute(self, sql: str, params: list | None = None) -> list[tuple]:
        """The write path for a plugin's own tables (made by its ``register_migrations``): one statement,
        committed before it returns; the rows of a ``RETURNING`` clause come back. Core tables are
        written only through the ``add_*``/``update_*`` methods, which keep them consistent."""
        cur = self._con.execute(sql, params or [])
        return [] if cur.description is None else cur.fetchall()

    @_locked
    def query(self, sql: str, params: list | None = None) -> tuple[list[str], list[tuple]]:
        """Run SQL on the store (meant for read-only queries, e.g. `evolver traces`; plugins write
        their tables with :meth:`execute`)."""
        try:
            cur = self._con.execute(sql, params or [])
        except duckdb.Error as exc:  # the user's SQL: its message, not a stack trace, and where to look
            tables = ", ".join(r[0] for r in self._con.execute("SHOW TABLES").fetchall())
            raise QueryError(f"{str(exc).strip()}\n(tables: {tables}; `evolver traces \"DESCRIBE episodes\"` "
                             f"lists a table's columns)") from exc
        if cur.description is None:
            return [], []
        return [d[0] for d in cur.description], cur.fetchall()

    @staticmethod
    def format_episode(episode: Episode) -> str:
        from evolver.trace_format import format_episode

        return format_episode(episode)
