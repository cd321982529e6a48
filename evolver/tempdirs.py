"""Temporary folders named after the process that made them (``<prefix><pid>-*``).

A process removes its own folders when it is done with them; one killed with SIGKILL cannot. So the
first folder a process makes with a prefix removes those that processes now gone left with that prefix:
a killed run's sandbox scratch, a killed driver's Ray folder, a killed worker's program copies.
"""
from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import tempfile


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@functools.lru_cache(maxsize=None)
def sweep(prefix: str, folder: str) -> int:
    """Remove the ``<prefix><pid>-*`` folders in ``folder`` whose process is gone (once per process, prefix and
    folder). Returns how many were removed."""
    removed = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    pattern = re.compile(re.escape(prefix) + r"(\d+)-\w+")
    for name in names:
        m = pattern.fullmatch(name)
        if m and int(m[1]) != os.getpid() and not _alive(int(m[1])):
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
            removed += 1
    return removed


def make(prefix: str, at_exit: bool = False) -> str:
    """A new temporary folder ``<prefix><pid>-*`` (after :func:`sweep`); ``at_exit``: removed when this
    process exits, too."""
    sweep(prefix, tempfile.gettempdir())
    folder = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")
    if at_exit:
        atexit.register(shutil.rmtree, folder, True)
    return folder
