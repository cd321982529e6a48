"""The store as the ui reads it: a private copy, never the file a run writes.

DuckDB admits one process per file, and a read-only reader takes a lock too: were the ui to open
``evolver.duckdb`` itself, ``evolver run`` could not start (or resume) while a page was being served. So the
ui copies the file (and its ``.wal``, which the copy replays) to a temporary folder and reads the copy. A
copy is made again on a request when the last one is older than ``max_age_s`` and the file has changed
since. Copying takes no lock: a run writing at that moment can leave a torn copy, so the copy is kept only
when the file's size and time did not change while it was copied and the copy opens; otherwise the
previous copy keeps serving, and the page says so.
"""
from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

from evolver import DB_FILE, EvolverError, Store

#: Attempts at one copy while a run is writing the file.
ATTEMPTS = 3


class Snapshot:
    """The newest good copy of ``<workspace>/evolver.duckdb``, opened as a :class:`evolver.Store`.

    :ivar taken: the wall-clock time (``time.time()``) the store last matched the copy.
    :ivar problem: why the last refresh kept the previous copy (None when it did not).
    """

    def __init__(self, workspace: str | Path, max_age_s: float = 5.0):
        self.source = Path(workspace) / DB_FILE
        self.max_age_s = max_age_s
        self.folder: Path | None = None  # made at the first copy: an app that is never served makes none
        self.taken: float | None = None
        self.problem: str | None = None
        self.version = 0  # counts copies: what a cache of rendered pages keys on
        self._store: Store | None = None
        self._previous: Store | None = None  # kept open for requests that started on it
        self._signature: tuple | None = None
        self._checked = 0.0
        self._lock = threading.Lock()

    def store(self) -> Store:
        """A store no older than ``max_age_s`` seconds when the file could be copied; else the last good copy."""
        with self._lock:
            if self._store is None or time.monotonic() - self._checked >= self.max_age_s:
                self._refresh()
            if self._store is None:
                raise EvolverError(self.problem or f"no store at {self.source}")
            return self._store

    def _stat(self) -> tuple | None:
        out = []
        for path in (self.source, self.source.with_name(self.source.name + ".wal")):
            try:
                st = path.stat()
                out.append((st.st_size, st.st_mtime_ns))
            except FileNotFoundError:
                out.append(None)
        return tuple(out) if out[0] is not None else None

    def _refresh(self) -> None:
        self._checked = time.monotonic()
        signature = self._stat()
        if signature is None:
            self.problem = (f"no store at {self.source}: nothing has been recorded there yet "
                            "(check --store, or start a run first)")
            return
        if signature == self._signature:  # unchanged since the copy: the copy is current
            self.taken, self.problem = time.time(), None
            return
        for _ in range(ATTEMPTS):
            if self.folder is None:
                self.folder = Path(tempfile.mkdtemp(prefix="evolver-ui-"))
            target = self.folder / f"copy-{self.version + 1}.duckdb"
            self._copy(target)
            after = self._stat()
            if after == signature:
                break
            self._discard(target)
            signature = after  # written while it was copied: once more
            if signature is None:
                break
            time.sleep(0.05)
        else:
            self.problem = "the store was being written on every attempt to copy it: showing the previous copy"
            return
        if signature is None:
            return
        try:
            store = Store(target)
        except Exception as exc:  # a torn copy fails in DuckDB's own ways; the next refresh tries again
            self._discard(target)
            self.problem = f"the copy of the store did not open ({exc}): showing the previous copy"
            return
        if self._previous is not None:
            old = self._previous.path
            self._previous.close()
            self._discard(old)
        self._previous, self._store = self._store, store
        self._signature, self.taken, self.problem = signature, time.time(), None
        self.version += 1

    def _copy(self, target: Path) -> None:
        shutil.copyfile(self.source, target)
        wal = self.source.with_name(self.source.name + ".wal")
        try:
            shutil.copyfile(wal, target.with_name(target.name + ".wal"))
        except FileNotFoundError:
            pass

    @staticmethod
    def _discard(path: Path) -> None:
        for p in (path, path.with_name(path.name + ".wal")):
            p.unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            for store in (self._store, self._previous):
                if store is not None:
                    store.close()
            self._store = self._previous = None
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder = None
