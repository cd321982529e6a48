"""A running run's live state, published as a small JSON file for readers that must not open the store.

DuckDB lets one process open the file at a time, and even a read-only reader would keep a run from
starting, so a viewer (``evolver ui``) never opens the store a run is writing: it reads a copy, which may
be seconds old, and this file for what the run is doing now. The run writes ``<workspace>/live/<run_id>.json``
when its status line changes, at most once a second (a change inside that second is written when it ends),
always by a write to a temporary file and a rename, so a reader sees a whole file or the previous one.

Fields: ``run_id``, ``pid``, ``host``, ``state`` (``running``, or ``closed`` once the run handle is closed:
finished or failed, the store's ``runs.status`` says which), ``status`` (the progress line), ``iteration``,
``iterations``, ``started`` and ``updated`` (Unix seconds), ``elapsed_s``, ``tokens`` (per role),
``frontier`` (members with their metrics). Publishing is best-effort: a full disk must not stop a run for it.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

LIVE_DIR = "live"
#: Seconds between two writes: a status line can change on every finished episode.
MIN_INTERVAL_S = 1.0


def live_path(workspace: str | Path, run_id: str) -> Path:
    return Path(workspace) / LIVE_DIR / f"{run_id}.json"


def read_live(workspace: str | Path, run_id: str) -> dict | None:
    """The last published state of ``run_id``, or None when it published none (or the file is unreadable)."""
    try:
        return json.loads(live_path(workspace, run_id).read_text())
    except (OSError, ValueError):
        return None


class LivePublisher:
    """Writes one run's live state, throttled to :data:`MIN_INTERVAL_S`, from any thread."""

    def __init__(self, run):
        self.run = run
        self.path = live_path(run.workspace, run.id)
        self._lock = threading.Lock()
        self._last = 0.0
        self._pending: threading.Timer | None = None

    def publish(self, state: str = "running", force: bool = False) -> None:
        with self._lock:
            wait = self._last + MIN_INTERVAL_S - time.monotonic()
            if wait > 0 and not force:
                if self._pending is None:  # the last change inside the interval is written when it ends
                    self._pending = threading.Timer(wait, self._flush)
                    self._pending.daemon = True
                    self._pending.start()
                return
            if self._pending is not None:
                self._pending.cancel()
                self._pending = None
            self._write(state)

    def _flush(self) -> None:
        with self._lock:
            if self._pending is None:  # cancelled by a forced write
                return
            self._pending = None
            self._write("running")

    def _write(self, state: str) -> None:
        self._last = time.monotonic()
        run = self.run
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            doc = {"run_id": run.id, "pid": os.getpid(), "host": socket.gethostname(), "state": state,
                   "status": run.status, "iteration": run.iteration, "iterations": run.config.loop.iterations,
                   "started": run.started, "updated": time.time(), "elapsed_s": round(run.elapsed(), 1),
                   "tokens": dict(run.tokens), "frontier": [{"program_id": m.program_id, "metrics": dict(m.metrics)}
                                                            for m in list(run.frontier.members)]}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(doc, default=str))
            os.replace(tmp, self.path)
        except (OSError, TypeError, ValueError, RuntimeError):  # RuntimeError: tokens grew while copied
            pass
