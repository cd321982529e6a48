"""A workspace (``config.store``) and the run that works in it, opened in one place.

The CLI, plugin commands and bench scripts all open the trace store and the program repository side by
side and then build a :class:`evolver.Run`; doing it here keeps the file name and the order of steps
(record the run, then ensure the seed) the same everywhere.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:  # the store pulls in DuckDB: imported when a workspace is opened, not before
    from evolver.config import dump_config, load_config
    from evolver.programs import ProgramRepo
    from evolver.run import Run
    from evolver.store import Store

#: The trace store's file name inside a workspace (next to ``programs/``, ``worktrees/``, ``reports/``).
DB_FILE = "evolver.duckdb"


def open_workspace(where: Config | str | Path, read_only: bool = False) -> tuple[Store, ProgramRepo]:
    """The workspace ``where`` names (a :class:`evolver.config.Config`, whose ``store`` it is, or a folder) as
    ``(Store, ProgramRepo)``. The folder is created when missing, unless ``read_only``; the caller closes
    the store (``with store:``)."""
    from evolver.programs import ProgramRepo
    from evolver.store import Store

    root = Path(getattr(where, "store", where))
    if not read_only:
        root.mkdir(parents=True, exist_ok=True)
    return Store(root / DB_FILE, read_only=read_only), ProgramRepo(root)


@contextmanager
def open_run(config: Config, run_id: str | None = None, *, resume: dict | None = None,
             nothing_to_resume: str = "no unfinished run to resume in this store", record: bool = True,
             console=None, corrections: list[str] = ()) -> Iterator[Run]:
    """A :class:`evolver.Run` in ``config``'s workspace, recorded in the store and with the seed program
    ensured; on exit the run (backends, benchmark) and then the store are closed. Marking the run finished
    or failed is the caller's: only it knows what counts as either.

    ``run_id``: the run's id (default: a fresh loop-style id). ``resume``: filters for
    :meth:`evolver.Store.latest_run` (``status``, ``prefix``, ``pattern``); the newest matching run continues
    with its own id and recorded config (``run.config``, not ``config``), its status set back to running,
    and ``run.resumed`` True; when none matches, :class:`evolver.EvolverError` with ``nothing_to_resume``.
    ``corrections`` (``KEY=VALUE`` as ``--set`` takes them) fix a resumed run's recorded config, and are recorded.
    ``record=False`` leaves recording and the seed to the caller (``run_loop`` does both itself).
    """
    from evolver.config import dump_config, load_config
    from evolver.errors import EvolverError
    from evolver.run import Run
    from evolver.seeding import ensure_seed

    store, repo = open_workspace(config)
    try:
        if resume is not None:
            row = store.latest_run(**resume)
            if row is None:
                raise EvolverError(nothing_to_resume)
            config, run_id = load_config(None, list(corrections), base=row["config"]), row["run_id"]
            store.update_run(run_id, status="running", config=dump_config(config) if corrections else None)
        run = Run(config, store, repo, run_id=run_id, resumed=resume is not None, console=console)
        try:
            if record:
                run.record()
                ensure_seed(run)
            yield run
        finally:
            run.close()
    finally:
        store.close()
