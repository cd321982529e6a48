"""The ``ray`` cluster engine (``[cluster] engine = "ray"``; ``pip install -e '.[ray]'``).

Ray actors, each holding one :class:`evolver.remote.Worker` (one executor replica: a GPU each when the
cluster has GPUs, else ``cluster.workers`` CPU workers), play the units the driver sends and stream
each episode back as it finishes (a generator method: Ray's streaming returns). The driver keeps the
store and the program repository; it reads the streams in one thread per worker and yields the
episodes in its own thread, where the store is written.

Program files go through the object store once per content hash, and each worker caches them on its
disk. Weights after a trainer's update go through the object store as well (:meth:`RayCluster.share`):
one ``put`` per update that every worker on a node maps without a copy, and no shared file system is
needed. A trained checkpoint that a program's manifest names is read from its folder: workers on other
machines need the workspace on a shared file system.

Faults: a worker that dies mid-share (its process killed, its node lost) is left out and the episodes it
had not returned are played again by the others; an episode is yielded once, whoever returns it. A
worker that cannot start (no GPU, a bad model path) is reported with its reason and the run goes on
without it, or stops with that reason when none is left. An error inside a worker's episode is that
episode's (a score of 0 with its trace); a systemic one (the backend cannot run) stops the run as it
would in-process.
"""
from __future__ import annotations

import os
import queue
import shutil
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

from evolver import tempdirs
from evolver.errors import EvolverError, PluginError
from evolver.remote import Cluster, Unit, Worker


class _Actor:
    """The body of one Ray actor: a :class:`Worker` and what the driver asks of it."""

    def __init__(self, config, env: dict, local_plugins: list[str], folder: str):
        os.environ.update(env)
        self.worker = Worker(config, folder, local_plugins=local_plugins)

    def ready(self) -> str:
        return self.worker.ready()

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.worker.close()

    def play(self, units: list[Unit], programs: dict, max_live: int):
        import ray

        for h, ref in programs.items():
            if not self.worker.has_program(h):
                self.worker.add_program(ray.get(ref))
        yield from self.worker.play(units, resolve=ray.get, max_live=max_live)


def ray_cluster(config) -> "RayCluster":
    try:
        import ray  # noqa: F401
    except ImportError:
        raise PluginError("cluster engine 'ray' needs Ray, which is not installed: pip install -e '.[ray]' "
                          "(or pip install 'ray>=2.40')") from None
    return RayCluster(config)


class RayCluster(Cluster):
    """See the module docstring."""

    name = "ray"

    def __init__(self, config):
        import ray

        cc = config.cluster
        self.config, self.started_here = config, False
        if not ray.is_initialized():
            options = dict(cc.options)
            if cc.address == "local":
                options.setdefault("include_dashboard", False)
                ray.init(**options)
            else:
                ray.init(address=cc.address, **options)
            self.started_here = True
        gpus = int(ray.cluster_resources().get("GPU", 0))
        n = cc.workers or gpus or 2
        per_gpu = cc.gpus_per_worker if cc.gpus_per_worker is not None else (1 if gpus else 0)
        actor = ray.remote(_Actor).options(num_cpus=cc.cpus_per_worker, num_gpus=per_gpu, max_restarts=0)
        from evolver import plugins
        from evolver.remote import ENV

        env = {k: os.environ[k] for k in ENV if k in os.environ}
        # Each worker keeps its copies of the programs in a folder of this one: a worker on this machine
        # that died or never started cannot remove its own, so close() removes them all here.
        self.folder = Path(tempdirs.make("evolver-ray-"))
        made = [actor.remote(config, env, plugins.local_paths(), str(self.folder / f"worker-{i}")) for i in range(n)]
        self.workers, self.failures = [], []
        for handle, ready in zip(made, [h.ready.remote() for h in made]):
            try:
                ray.get(ready)
                self.workers.append(handle)
            except Exception as exc:  # a bad model path, no GPU, a plugin missing on that node
                self.failures.append(_reason(exc))
                ray.kill(handle)
                print(f"evolver: a ray worker could not start: {self.failures[-1]}", file=sys.stderr)
        if not self.workers:
            self.close()
            raise EvolverError(f"no ray worker could start ({n} tried): {self.failures[0]}")
        self._programs: dict[str, Any] = {}

    def share(self, obj: Any) -> Any:
        import ray

        return ray.put(obj)

    def resolve(self, handle: Any) -> Any:
        import ray

        return ray.get(handle)

    def play(self, units: list[Unit], programs: dict[str, dict], config=None,
             max_live: int = 32) -> Iterator[list[tuple[tuple, Any]]]:
        import ray

        for h, packed in programs.items():
            if h not in self._programs:
                self._programs[h] = ray.put(packed)
        refs = {h: self._programs[h] for h in programs}
        events: queue.Queue = queue.Queue()
        owed: dict[int, dict[tuple, Unit]] = {}
        done: set[tuple] = set()

        def stream(worker, share: list[Unit]) -> None:
            try:
                for ref in worker.play.options(num_returns="streaming").remote(share, refs, max_live):
                    events.put(("episode", worker, ray.get(ref)))
                events.put(("end", worker, None))
            except BaseException as exc:
                events.put(("error", worker, exc))

        running = 0

        def start(share_of: dict) -> None:
            nonlocal running
            for worker, share in share_of.items():
                if share:
                    owed.setdefault(id(worker), {}).update({u.key: u for u in share})
                    running += 1
                    threading.Thread(target=stream, args=(worker, share), daemon=True).start()
        start(_split(units, self.workers))
        while running:
            kind, worker, payload = events.get()
            if kind == "episode":
                arrived = [(worker, payload)]
                while True:  # what else has arrived meanwhile goes to the store in the same write
                    try:
                        more = events.get_nowait()
                    except queue.Empty:
                        break
                    if more[0] != "episode":
                        events.put(more)  # after the ones in hand, in the next round
                        break
                    arrived.append((more[1], more[2]))
                batch = []
                for w, (key, episode) in arrived:
                    owed[id(w)].pop(key, None)
                    if key not in done:
                        done.add(key)
                        batch.append((key, episode))
                if batch:
                    yield batch
                continue
            running -= 1
            if kind == "end":
                continue
            if not _died(payload):
                raise _cause(payload)
            self.workers = [w for w in self.workers if w is not worker]
            self.failures.append(_reason(payload))
            left = [u for k, u in owed.pop(id(worker), {}).items() if k not in done]
            print(f"evolver: a ray worker died ({self.failures[-1]}); {len(left)} episodes play again on "
                  f"{len(self.workers)} others", file=sys.stderr)
            if not self.workers:
                raise EvolverError(f"every ray worker died; the last: {self.failures[-1]}. The episodes "
                                   "stored so far are kept: `evolver run --resume` continues")
            start(_split(left, self.workers))

    def close(self) -> None:
        import ray

        workers = getattr(self, "workers", [])
        try:  # each worker removes its folder of program copies and closes its models; then it is killed
            ray.get([w.close.remote() for w in workers], timeout=30)
        except Exception:  # a dead or stuck worker: killing it is all that is left
            pass
        for worker in workers:
            try:
                ray.kill(worker)
            except Exception:
                pass
        if getattr(self, "folder", None) is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.workers = []
        if self.started_here and ray.is_initialized():
            ray.shutdown()
            self.started_here = False


def _split(units: list[Unit], workers: list) -> dict:
    """Round-robin shares, so each worker gets every program and category alike."""
    shares: dict = {w: [] for w in workers}
    for i, u in enumerate(units):
        shares[workers[i % len(workers)]].append(u)
    return shares


def _died(exc: BaseException) -> bool:
    import ray.exceptions as rx

    dead = tuple(getattr(rx, n) for n in ("RayActorError", "ActorDiedError", "ActorUnavailableError",
                                          "WorkerCrashedError", "NodeDiedError", "ObjectLostError")
                 if hasattr(rx, n))
    return isinstance(exc, dead)


def _cause(exc: BaseException) -> BaseException:
    """A worker's own exception (a BackendError stays a BackendError), not Ray's wrapper."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def _reason(exc: BaseException) -> str:
    cause = _cause(exc)
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[-1] if text else ''}"[:300]
