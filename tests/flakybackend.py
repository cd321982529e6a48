"""A backend whose first construction fails, as a worker without the GPU it needs would (tests/test_cluster.py)."""
from __future__ import annotations

import os

from evolver.hookspecs import hookimpl


@hookimpl
def register_backends(register):
    def flaky(model=None, marker: str = "", **_):
        from evolver.backends.scripted import ScriptedBackend
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return ScriptedBackend(rule=lambda req: "nothing", model="flaky")
        raise RuntimeError("no GPU on this worker")
    register("flaky", flaky, "fails the first time it is made")
