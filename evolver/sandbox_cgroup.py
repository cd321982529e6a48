"""The sandbox's process limit: a pids cgroup per run, where this machine lets one be made.

Where a pids cgroup can be created (cgroup v1 ``/sys/fs/cgroup/pids``, or a delegated cgroup v2 subtree;
normally as root), :mod:`evolver.sandbox` gives every run its own, capped at :data:`PIDS_LIMIT` processes
and threads, and :func:`cgroup_end` kills everything left in it when the run ends.
"""
from __future__ import annotations

import functools
import itertools
import os
import re
import signal
import time
import warnings

PIDS_LIMIT = 64  # processes + threads per run, where a pids cgroup is available (EVOLVER_SANDBOX_PIDS)

_CG_PREFIX = "evolver-sbx-"
_cg_counter = itertools.count()
_cg_warned = []


def _candidates() -> list[str]:
    out = []
    try:
        with open("/proc/self/cgroup") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return out
    for hid, controllers, path in (line for line in lines if len(line) == 3):
        if "pids" in controllers.split(","):
            out += [f"/sys/fs/cgroup/pids{path}".rstrip("/"), "/sys/fs/cgroup/pids"]
        elif hid == "0" and controllers == "" and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            out.append(f"/sys/fs/cgroup{path}".rstrip("/"))
    return list(dict.fromkeys(out))


@functools.lru_cache(maxsize=None)
def cgroup_base() -> str | None:
    """A cgroup directory under which this process can create pids-limited children, or None."""
    for base in _candidates():
        probe = os.path.join(base, f"{_CG_PREFIX}probe-{os.getpid()}")
        try:
            os.mkdir(probe)
        except OSError:
            continue
        try:
            with open(os.path.join(probe, "pids.max"), "w") as f:
                f.write("8")
            _clean_stale(base)
            return base
        except OSError:
            continue
        finally:
            try:
                os.rmdir(probe)
            except OSError:
                pass
    return None


def _clean_stale(base: str):
    """Remove the empty cgroups of evolver processes that died without closing their sandboxes."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        m = re.fullmatch(_CG_PREFIX + r"(\d+)-\d+", name)
        if m and not os.path.exists(f"/proc/{m[1]}"):
            cgroup_end(os.path.join(base, name))


def pids_limit(pids: int | None) -> int:
    """``pids``, else ``EVOLVER_SANDBOX_PIDS``, else :data:`PIDS_LIMIT`; 0 turns the cgroup off."""
    if pids is not None:
        return int(pids)
    return int(os.environ.get("EVOLVER_SANDBOX_PIDS", "") or PIDS_LIMIT)


def cgroup_new(limit: int) -> str | None:
    """A new pids cgroup capped at ``limit``, or None where none can be made (warned once) or ``limit`` is 0."""
    if limit <= 0:  # turned off (EVOLVER_SANDBOX_PIDS=0): no limit, no cgroup
        return None
    base = cgroup_base()
    if base is None:
        if not _cg_warned:
            _cg_warned.append(True)
            warnings.warn("evolver sandbox: no writable pids cgroup here, so sandboxed code runs without a "
                          "limit on its number of processes", RuntimeWarning, stacklevel=4)
        return None
    path = os.path.join(base, f"{_CG_PREFIX}{os.getpid()}-{next(_cg_counter)}")
    try:
        os.mkdir(path)
        with open(os.path.join(path, "pids.max"), "w") as f:
            f.write(str(max(1, limit)))
        return path
    except OSError:
        cgroup_end(path)
        return None


def cgroup_end(path: str | None):
    """Kill everything left in the cgroup (daemons that left the process group too), then remove it."""
    if not path:
        return
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            break
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.002)
    try:
        os.rmdir(path)
    except OSError:
        pass
