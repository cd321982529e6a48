"""Episodes played away from the driver: what a cluster worker does, with no cluster engine in it.

The driver (the process that runs the loop) keeps the only DuckDB writer and the program repository.
It sends a worker units (:class:`Unit`): an episode to play (its task, seed, purpose and ids already set),
the content hash of its program and a picklable description of the backend to play it with
(:func:`describe`). Program files travel once per hash (:func:`pack_program`) and the worker keeps
them in a folder of its own. :class:`Worker` plays its share in lockstep, exactly as
:func:`evolver.evaluate.evaluate_many` does in-process, and yields each episode as it finishes; the
driver stores it. A cluster engine (``evolver_ray``, registered under ``register_clusters``) only
moves units and episodes; :class:`Cluster` is its contract.

Backend descriptions:
- a backend the run's model pool made (:class:`evolver.models.Models`): ``{"backend", "model",
  "options"}``, rebuilt with the same plugin on the worker (a checkpoint is a folder the worker
  must see: same machine or a shared file system);
- a :class:`evolver.SampledBackend` (or a subclass) around one of those: a copy of the wrapper without
  its inner backend, and the inner description, so sampled episodes draw the samples they would draw here;
- a backend whose weights changed in this process (a trainer's rollout engine): ``weights`` holds a
  handle the cluster engine made (:meth:`Cluster.share`) and ``version`` its model id; a worker loads
  them before it plays any unit that names a newer version, so none plays stale weights.
"""
from __future__ import annotations

import abc
import copy
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

from evolver import tempdirs
from evolver.types import Episode, Program

SKIP = {".git"}
#: The environment a worker takes from the driver: which plugins load, how the sandbox may run.
ENV = ("EVOLVER_PLUGINS", "EVOLVER_PLUGIN_PATH", "EVOLVER_ALLOW_AUDIT_SANDBOX", "EVOLVER_SANDBOX_PIDS",
       "EVOLVER_HOME", "HF_HUB_OFFLINE")


@dataclasses.dataclass
class Unit:
    """One episode for a worker: ``key`` is the driver's, ``episode`` the template to play."""

    key: tuple
    episode: Episode
    program: str
    backend: dict
    #: Whether the harness counts tokens with the model's tokenizer (else characters / 4), as on the driver.
    tokenizer: bool = False


class Cluster(abc.ABC):
    """The contract of a cluster engine (``[cluster] engine``): plays units on its workers.

    ``play(units, programs, config, max_live)`` yields lists of ``(key, episode)`` as they finish (those
    that arrived together in one list: the driver stores each list in one write), each key once, whatever
    worker died on the way (its unfinished units play again elsewhere). ``programs`` maps a program hash to
    its packed files; ``max_live`` caps the episodes a worker plays at once. A worker that cannot start is reported and left out; when none
    is left, ``play`` raises :class:`evolver.EvolverError` saying why.
    ``share(obj)`` returns a handle workers can read ``obj`` through (weights after an update)."""

    name = "cluster"

    @abc.abstractmethod
    def play(self, units: list[Unit], programs: dict[str, dict], config,
             max_live: int = 32) -> Iterator[list[tuple[tuple, Episode]]]:
        """Play ``units`` on the workers (see the class docstring)."""

    def share(self, obj: Any) -> Any:
        return obj

    def resolve(self, handle: Any) -> Any:
        """On a worker: the object behind a :meth:`share` handle."""
        return handle

    def close(self) -> None:
        pass


def describe(backend) -> dict | None:
    """A picklable description a worker rebuilds ``backend`` from, or None when it can only play here."""
    from evolver.backends.sampling import SampledBackend

    if isinstance(backend, SampledBackend):
        inner = describe(backend.inner)
        if inner is None:
            return None
        wrapper = copy.copy(backend)  # its class and settings (a trainer's subclass samples its own way)
        wrapper.inner = None
        return {"sampled": wrapper, "inner": inner}
    spec = getattr(backend, "remote_spec", None)
    if not isinstance(spec, dict):
        return None
    spec = dict(spec)
    if backend.model != spec.pop("made_as", backend.model):  # its weights changed in this process
        shared = getattr(backend, "shared_weights", None)  # (model id, handle), set where they changed
        if shared is None or shared[0] != backend.model:
            return None
        spec["version"], spec["weights"] = shared
    return spec


def share_weights(run, backend, state: Callable[[], dict], version: str) -> bool:
    """After ``backend``'s weights changed in this process (``load_weights``/``weights_changed`` with model id
    ``version``), let the run's cluster workers play with them too: ``state()`` (a state dict) goes to
    the cluster once and each worker loads it before its next unit that names ``version``. Without a
    cluster it does nothing. Until it is called, episodes of the changed backend play in this process,
    never on a worker's stale weights. Returns whether the weights were shared."""
    cluster = getattr(run, "cluster", None)
    if cluster is None or getattr(backend, "remote_spec", None) is None:
        return False
    target = getattr(backend, "inner", backend)  # the model itself: every wrapper made later sees it
    target.shared_weights = (version, cluster.share(state()))
    return True


def pack_program(program: Program) -> dict:
    """A program's files and identity, to rebuild it on a worker (:meth:`Worker.add_program`)."""
    root = Path(program.root)
    files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
             if p.is_file() and not SKIP & set(p.relative_to(root).parts)}
    return {"id": program.id, "commit": program.commit, "hash": program.hash,
            "manifest": program.manifest, "files": files}


class WorkerRun:
    """What hook implementations and the step monitor see of the run on a worker: its ``config``,
    ``id`` and backends, no store (the driver writes)."""

    def __init__(self, config, run_id: str, folder: Path):
        from evolver.models import Models

        self.config, self.id, self.store, self.resumed = config, run_id, None, False
        self.tokens: dict[str, int] = {}
        self.models = Models(config, folder, self.tokens)
        self.workspace = folder

    def backend(self, role: str):
        return self.models.backend(role)


class Worker:
    """Plays units (see the module docstring). One per cluster worker; it holds one model per
    backend description and the program folders it was sent."""

    def __init__(self, config, folder: str | None = None, local_plugins: list[str] = ()):
        from evolver import plugins

        for path in local_plugins:  # the driver's --plugin files, at the same paths
            if str(path) not in plugins.local_paths():
                plugins.load_local(path)
        self.config = config
        self.folder = Path(folder or tempdirs.make("evolver-worker-"))
        self.folder.mkdir(parents=True, exist_ok=True)
        self.programs: dict[str, Program] = {}
        self.backends: dict[str, Any] = {}
        self.versions: dict[str, str] = {}
        self.benchmark = plugins.make("benchmark", config.benchmark, **config.benchmark_options)
        self.runs: dict[str, WorkerRun] = {}

    def ready(self) -> str:
        """Build the executor the config names (a worker that cannot start says why here)."""
        rc = self.config.role("executor")
        backend = self.backend({"backend": rc.backend, "model": rc.model, "options": rc.options})
        return f"{backend.name} {backend.model}"

    def has_program(self, program_hash: str) -> bool:
        return program_hash in self.programs

    def add_program(self, packed: dict) -> None:
        root = self.folder / "programs" / packed["hash"]
        if not root.exists():
            part = root.with_name(root.name + ".part")
            shutil.rmtree(part, ignore_errors=True)
            for rel, data in packed["files"].items():
                (part / rel).parent.mkdir(parents=True, exist_ok=True)
                (part / rel).write_bytes(data)
            part.rename(root)
        self.programs[packed["hash"]] = Program(packed["id"], packed["commit"], str(root), packed["hash"],
                                                dict(packed["manifest"]))

    def backend(self, spec: dict, resolve: Callable[[Any], Any] = lambda h: h):
        """The backend ``spec`` describes, made once (weights loaded when ``spec`` names a newer version)."""
        from evolver import plugins

        if "sampled" in spec:
            wrapper = copy.copy(spec["sampled"])
            wrapper.inner = self.backend(spec["inner"], resolve)
            return wrapper
        base = {k: spec[k] for k in ("backend", "model", "options")}
        key = json.dumps(base, sort_keys=True, default=repr)
        if key not in self.backends:
            self.backends[key] = plugins.make("backend", base["backend"], model=base["model"], **base["options"])
        backend = self.backends[key]
        version = spec.get("version")
        if version is not None and self.versions.get(key) != version:
            backend.load_weights(resolve(spec["weights"]), model_id=version)
            self.versions[key] = version
        return backend

    def run(self, run_id: str) -> WorkerRun:
        if run_id not in self.runs:
            self.runs[run_id] = WorkerRun(self.config, run_id, self.folder)
        return self.runs[run_id]

    def play(self, units: list[Unit], resolve: Callable[[Any], Any] = lambda h: h,
             max_live: int = 32) -> Iterator[tuple[tuple, Episode]]:
        """Play ``units`` in lockstep; yield ``(key, episode)`` as each finishes."""
        from evolver.harness import context_window_of
        from evolver.harness_sandbox import sandboxed_harnesses
        from evolver.lockstep import Live, play_iter, try_harness
        from evolver.monitor import step_monitor

        if not units:
            return
        run = self.run(units[0].episode.run_id)
        ctxs, harness_of = {}, {}
        with sandboxed_harnesses(run, self.benchmark) as sandboxed:
            factory = sandboxed if self.config.loop.sandbox_harness else None
            monitor = step_monitor(run)
            lives = []
            made: dict[int, Any] = {}  # units of one job share their spec object, so their backend too
            for u in units:
                if id(u.backend) not in made:
                    made[id(u.backend)] = self.backend(u.backend, resolve)
                backend = made[id(u.backend)]
                at = (u.program, u.tokenizer)
                if at not in ctxs:
                    ctxs[at] = _context(run, self.programs[u.program])
                    if u.tokenizer:
                        ctxs[at].count_tokens = self.backend(_base(u.backend), resolve).count_tokens
                    ctxs[at].context_window = context_window_of(backend)
                    harness_of[at] = try_harness(ctxs[at], factory)
                lives.append(Live(dataclasses.replace(u.episode, steps=[]), ctxs[at], harness_of[at],
                                   u.episode.max_steps, key=u.key, backend=backend, monitor=monitor))
            max_live = min(max_live, getattr(self.benchmark, "max_live", None) or max_live)
            for done in play_iter(iter(lives), self.benchmark, max_live):
                for lv in done:
                    yield lv.key, lv.episode

    def close(self) -> None:
        for run in self.runs.values():
            run.models.close()
        for backend in self.backends.values():
            backend.close()
        self.benchmark.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _base(spec: dict) -> dict:
    return _base(spec["inner"]) if "sampled" in spec else spec


def _context(run: WorkerRun, program: Program):
    """What the harness sees, skill selection through the same hook as on the driver."""
    from evolver import plugins
    from evolver.harness import program_context

    ctx = program_context(program)
    default, hook = ctx.select_skills, plugins.hook()

    def select(task, k):
        chosen = hook.select_skills(run=run, task=task, program=program, skills=ctx.skills, k=k)
        return default(task, k) if chosen is None else list(chosen)[:k]
    ctx.select_skills = select
    return ctx
