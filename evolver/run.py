"""The run context: everything a run holds (config, store, program repository, benchmark, backends,
frontier), built once and handed to the loop, proposers and hook implementations.

New information arrives as new attributes, which old plugins simply ignore.
"""
from __future__ import annotations

import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from evolver import plugins
from evolver.backends.base import Backend, Lowered
from evolver.config import Config, dump_config
from evolver.frontier import Frontier
from evolver.harness import ProgramContext, program_context
from evolver.types import GenRequest, GenResult, Program

# Ids of runs the loop starts (``evolver run``); eval-, train-, init and plugin runs are named otherwise,
# so `evolver run --resume` never picks up a killed training or evaluation run.
LOOP_RUN_ID = r"\d{8}-\d{6}-[0-9a-f]{4}"


def checkpoint_path(workspace: Path, model: str | None) -> str | None:
    """A manifest's ``model`` as a loadable weights folder (relative paths are in the workspace), or
    None: no model, a backend's model name ("embedded", a hub id) or a folder that is not there."""
    if not model or model == "embedded":
        return None
    path = Path(model) if Path(model).is_absolute() else Path(workspace) / model
    return str(path.resolve()) if (path / "config.json").is_file() else None


class CountingBackend(Backend):
    """Wraps a backend to count the tokens a role spends (for budgets and the report)."""

    def __init__(self, inner: Backend, counter: dict, role: str):
        self.inner, self.counter, self.role = inner, counter, role
        self.name, self.model, self.scores_options = inner.name, inner.model, inner.scores_options

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        return self._count(self.inner.generate(requests))

    def choose(self, requests):
        return self._count(self.inner.choose(requests))

    def lowered(self, requests: list) -> Lowered | None:
        low = self.inner.lowered(requests)
        return low and Lowered(low.engine, low.gens, lambda results: self._count(low.finish(results)))

    def _count(self, results: list) -> list:
        self.counter[self.role] = self.counter.get(self.role, 0) + sum(r.prompt_tokens + r.completion_tokens
                                                                       for r in results)
        return results

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    @property
    def base_model(self) -> str:
        return self.inner.base_model

    def __getattr__(self, name: str) -> Any:  # tokenizer, hf_model, load_weights, ...
        return getattr(self.inner, name)


class Run:
    """The run handle that the loop, proposers, trainers and hooks get. Plugins read these; new ones
    arrive as new attributes.

    Attributes:
        id: the run's id (``evolver run``'s look like ``20250101-120000-abcd``; trainers and plugins
            name theirs ``train-...``, ``<run>-grpo-it3``, ...).
        config: the validated :class:`evolver.Config`; a plugin's options are ``config.plugins[NAME]``.
        store: the trace store (:class:`evolver.Store`): episodes, programs, proposals, train steps.
        repo: the program repository (:class:`evolver.ProgramRepo`): ``checkout(ref)``, manifests, tags.
        workspace: the workspace folder (``config.store``) that holds both, checkpoints and reports.
        frontier: the :class:`evolver.Frontier` of non-dominated programs.
        benchmark: the configured :class:`evolver.Benchmark`, made on first use.
        iteration: the loop's current iteration (-1 before the first).
        resumed: True when this run continues a stopped one.
        tokens: tokens spent per role (``backend(role)`` counts them).
        started: the wall-clock start (``time.time()``); ``elapsed()`` is the seconds since.
        status: one line for the progress display; set it to say what a long step is doing.

    Methods: ``backend(role)``, ``executor_for(program)``, ``checkpoint_of(program)``,
    ``context(program)`` (what a harness sees, skills through the ``select_skills`` hook),
    ``commit_child(...)``, ``training_run(program, run_id)``, ``log(message)``, ``record()``, ``close()``.
    """

    def __init__(self, config: Config, store, repo, run_id: str | None = None, resumed: bool = False,
                 console=None):
        self.config = config
        self.store = store
        self.repo = repo
        self.id = run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4]  # matches LOOP_RUN_ID
        self.resumed = resumed
        self.console = console
        self.workspace = Path(config.store)
        self.tokens: dict[str, int] = {}
        self.started = time.time()
        self.iteration = -1
        lc = config.loop
        self.frontier: Frontier = Frontier.from_config(lc.objectives, lc.frontier_capacity, lc.gate, lc.gate_level)
        self._backends: dict[tuple, Backend] = {}
        self._benchmark = None
        self.ui = None  # the progress display (evolver.ui.LiveStatus), when one is attached
        self._status = ""

    @property
    def status(self) -> str:
        """One line for the progress display; setting it refreshes the display."""
        return self._status

    @status.setter
    def status(self, text: str) -> None:
        self._status = text
        if self.ui is not None:
            self.ui.update(self)

    # -- parts, built lazily -------------------------------------------------------------------
    @property
    def benchmark(self):
        if self._benchmark is None:
            name, options = self.config.benchmark, self.config.benchmark_options
            if name == "twx" and shutil.which("java") is None:
                # TextWorldExpress runs in a JVM; without Java the zero-dependency benchmark stands in.
                print("evolver: Java not found, so twx cannot run; using the built-in 'basic' benchmark "
                      "instead (install openjdk-17-jre-headless for twx)", file=sys.stderr)
                name, options = "basic", {}
            self._benchmark = plugins.make("benchmark", name, **options)
        return self._benchmark

    def backend(self, role: str) -> Backend:
        """The backend for a role. Roles that name the same backend and model share one instance
        (one copy of the weights in memory)."""
        rc, key = self.config.role(role), self._role_key(role)
        if key not in self._backends:
            self._backends[key] = plugins.make("backend", rc.backend, model=rc.model, **rc.options)
        return CountingBackend(self._backends[key], self.tokens, role)

    def checkpoint_of(self, program: Program) -> str | None:
        """The weights folder a program's manifest names (``model``: a trained checkpoint, relative
        to the workspace or absolute), or None when it plays with the configured executor model."""
        return checkpoint_path(self.workspace, (program.manifest or {}).get("model"))

    def executor_for(self, program: Program) -> Backend:
        """The executor as ``program`` plays: with its own checkpoint's weights when it carries one
        (a trained program and every descendant, which inherit the manifest's ``model``), else the
        configured executor. The two most recently used checkpoints stay loaded."""
        ckpt = self.checkpoint_of(program)
        rc = self.config.role("executor")
        if ckpt is None or ckpt == rc.model:
            return self.backend("executor")
        key = ("checkpoint", rc.backend, ckpt, self._role_key("executor")[2])
        if key in self._backends:
            self._backends[key] = self._backends.pop(key)  # most recent last
        else:
            loaded = [k for k in self._backends if k[0] == "checkpoint"]
            for old in loaded[:-1]:
                self._backends.pop(old).close()
            self._backends[key] = plugins.make("backend", rc.backend, model=ckpt, **rc.options)
        return CountingBackend(self._backends[key], self.tokens, "executor")

    def context(self, program: Program) -> ProgramContext:
        """What the harness sees of a program; skill selection goes through the select_skills hook."""
        ctx = program_context(program)
        default = ctx.select_skills
        hook = plugins.hook()

        def select(task, k):
            chosen = hook.select_skills(run=self, task=task, program=program, skills=ctx.skills, k=k)
            return default(task, k) if chosen is None else list(chosen)[:k]
        ctx.select_skills = select
        executor = self._backends.get(self._role_key("executor"))
        if executor is not None:
            ctx.count_tokens = executor.count_tokens
        return ctx

    def _role_key(self, role: str) -> tuple:
        rc = self.config.role(role)
        return (rc.backend, rc.model, tuple(sorted((k, repr(v)) for k, v in rc.options.items())))

    def proposer_tokens(self) -> int:
        return sum(v for k, v in self.tokens.items() if k != "executor")

    def elapsed(self) -> float:
        return time.time() - self.started

    def commit_child(self, parent: Program, candidate_id: str, manifest: dict, message: str,
                     edit: Callable[[Path], None] | None = None) -> Program:
        """A child of ``parent`` outside the loop (a trainer's checkpoint, a bank, a harness switch):
        a worktree from the parent's commit, ``edit(path)`` applied (it may raise to abandon the
        change), committed with ``manifest`` and registered in the store under this run."""
        path = self.repo.new_candidate(candidate_id, parent.commit)
        try:
            if edit is not None:
                edit(path)
            program = self.repo.commit_candidate(candidate_id, manifest, message)
        finally:
            self.repo.remove_worktree(candidate_id)
        self.store.add_program(program.id, self.id, program.commit, program.hash, parent.id,
                               manifest.get("operator"), None, program.manifest)
        return program

    def training_run(self, program: Program, run_id: str) -> "Run":
        """A run of its own for training ``program``'s policy (a trainer proposer's): the same config,
        store and repository, its executor loaded from ``program``'s checkpoint when it has one, so the
        loop's executor is never trained in place. Recorded in the store once."""
        config = self.config.model_copy(deep=True)
        start = self.checkpoint_of(program)
        if start:
            config.roles["executor"].model = start
        train = Run(config, self.store, self.repo, run_id=run_id)
        if self.store.get_run(run_id) is None:
            train.record()
        return train

    def log(self, message: str) -> None:
        if self.console is not None:
            self.console.log(message)

    def record(self) -> None:
        """Create or refresh this run's row in the store."""
        if self.store.get_run(self.id) is None:
            self.store.create_run(self.id, self.config.benchmark, dump_config(self.config))

    def close(self) -> None:
        for b in self._backends.values():
            b.close()
        if self._benchmark is not None:
            self._benchmark.close()
