"""The run context: everything a run holds (config, store, program repository, benchmark, backends,
frontier), built once and handed to the loop, proposers and hook implementations.

New information arrives as new attributes, which old plugins simply ignore.
"""
from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from evolver import plugins
from evolver.backends.base import Backend
from evolver.config import Config, dump_config
from evolver.errors import EvolverError
from evolver.frontier import Frontier
from evolver.harness import ProgramContext, context_window_of, program_context
from evolver.models import CountingBackend, Models, checkpoint_path  # noqa: F401 (re-exported)
from evolver.types import Program

# Ids of runs the loop starts (``evolver run``); eval-, train-, init and plugin runs are named otherwise,
# so `evolver run --resume` never picks up a killed training or evaluation run.
LOOP_RUN_ID = r"\d{8}-\d{6}-[0-9a-f]{4}"


class Run:
    """The run handle that the loop, proposers, trainers and hooks get. Plugins read these; new ones
    arrive as new attributes.

    Attributes:
        id: the run's id (``evolver run``'s look like ``20250101-120000-abcd``; trainers and plugins
            name theirs ``train-...``, ``<run>-grpo-it3``, ...).
        config: the validated :class:`evolver.config.Config`; a plugin's options are ``config.plugins[NAME]``.
        store: the trace store (:class:`evolver.Store`): episodes, programs, proposals, train steps.
        repo: the program repository (:class:`evolver.ProgramRepo`): ``checkout(ref)``, manifests, tags.
        workspace: the workspace folder (``config.store``) that holds both, checkpoints and reports.
        frontier: the :class:`evolver.frontier.Frontier` of non-dominated programs.
        benchmark: the configured :class:`evolver.Benchmark`, made on first use.
        iteration: the loop's current iteration (-1 before the first).
        resumed: True when this run continues a stopped one.
        tokens: tokens spent per role (``backend(role)`` counts them).
        models: the backend pool (:class:`evolver.models.Models`) behind ``backend``, ``executor_for``
            and ``checkpoint_of``.
        started: the wall-clock start (``time.time()``); ``elapsed()`` is the seconds since.
        status: one line for the progress display; set it to say what a long step is doing. It is also
            published to ``<workspace>/live/<id>.json`` (:mod:`evolver.live`), which ``evolver ui`` reads.

    Methods: ``backend(role)``, ``executor_for(program)``, ``checkpoint_of(program)``,
    ``context(program)`` (what a harness sees, skills through the ``select_skills`` hook),
    ``commit_child(...)``, ``training_run(program, run_id)``, ``add_train_steps(rows)``, ``log(message)``,
    ``record()``, ``close()``.
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
        self.plan: dict | None = None  # what the loop said it would play at most (evolver.playing.planned)
        self.estimate: dict | None = None  # what it said it would most likely spend (evolver.estimate)
        self.forecasts: list[dict] = []  # the same, said again after each iteration (evolver.estimate.forecast)
        self._heard: list[list[str]] = []  # the lists :meth:`heard` is filling
        lc = config.loop
        self.frontier: Frontier = Frontier.from_config(lc.objectives, lc.frontier_capacity, lc.gate, lc.gate_level)
        self.models = Models(config, self.workspace, self.tokens)
        self._benchmark = None
        self._cluster = None
        self.ui = None  # the progress display (evolver.live_status.LiveStatus), when one is attached
        self._status = ""
        self._live = None  # evolver.live.LivePublisher, made on the first status: what `evolver ui` shows

    @property
    def status(self) -> str:
        """One line for the progress display; setting it refreshes the display."""
        return self._status

    @status.setter
    def status(self, text: str) -> None:
        self._status = text
        if self.ui is not None:
            self.ui.update(self)
        if self._live is None:
            from evolver.live import LivePublisher

            self._live = LivePublisher(self)
        self._live.publish()

    # -- parts, built lazily -------------------------------------------------------------------
    @property
    def benchmark(self):
        if self._benchmark is None:
            self._benchmark = plugins.make("benchmark", self.config.benchmark, **self.config.benchmark_options)
            if not self.config.demonstrations:  # rewards alone: this run sees no demonstration
                self._benchmark.demonstration = lambda task: None
        return self._benchmark

    @property
    def cluster(self):
        """The cluster engine episodes play on (``[cluster] engine``), started on first use; None plays
        them in this process."""
        if self._cluster is None and self.config.cluster.engine != "local":
            self._cluster = plugins.make("cluster", self.config.cluster.engine, config=self.config)
        return self._cluster

    def backend(self, role: str) -> Backend:
        """The backend for a role (:meth:`evolver.models.Models.backend`): roles that name the same backend
        and model share one instance."""
        return self.models.backend(role)

    def checkpoint_of(self, program: Program) -> str | None:
        """The weights folder ``program``'s manifest names, or None (:meth:`evolver.models.Models.checkpoint_of`)."""
        return self.models.checkpoint_of(program)

    def executor_for(self, program: Program) -> Backend:
        """The executor as ``program`` plays, with its checkpoint when it has one
        (:meth:`evolver.models.Models.executor_for`)."""
        return self.models.executor_for(program)

    def context(self, program: Program) -> ProgramContext:
        """What the harness sees of a program; skill selection goes through the select_skills hook."""
        ctx = program_context(program)
        default = ctx.select_skills
        hook = plugins.hook()

        def select(task, k):
            chosen = hook.select_skills(run=self, task=task, program=program, skills=ctx.skills, k=k)
            return default(task, k) if chosen is None else list(chosen)[:k]
        ctx.select_skills = select
        # The executor's tokenizer and window, from the first context on: the budgets a harness computes
        # must not depend on whether the model happened to be loaded already.
        executor = self.models.loaded("executor")
        if executor is None:
            try:
                executor = self.models.backend("executor")
            except EvolverError:  # a command that plays nothing needs no model; one that plays fails there
                return ctx
        ctx.count_tokens = executor.count_tokens
        ctx.context_window = context_window_of(executor)
        return ctx

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
        train._cluster, train._shares_cluster = self.cluster, True  # one set of workers per driver
        if self.store.get_run(run_id) is None:
            train.record()
        return train

    def add_train_steps(self, rows: list[dict]) -> None:
        """Record training steps (each row: ``step`` and its metrics) in the store's ``train_steps`` table,
        then hand each to the ``on_train_step`` hook (experiment trackers log them as they come)."""
        self.store.add_train_steps(self.id, rows)
        hook = plugins.hook()
        for row in rows:
            hook.on_train_step(run=self, step=int(row["step"]),
                               metrics={k: v for k, v in row.items() if k != "step"})

    def log(self, message: str) -> None:
        for said in self._heard:
            said.append(message)
        if self.console is not None:
            self.console.log(message)

    @contextmanager
    def heard(self) -> Iterator[list[str]]:
        """What :meth:`log` says inside the block, in order (why a proposer built nothing, in its words)."""
        said: list[str] = []
        self._heard.append(said)
        try:
            yield said
        finally:
            self._heard.remove(said)

    def record(self) -> None:
        """Create or refresh this run's row in the store."""
        if self.store.get_run(self.id) is None:
            self.store.create_run(self.id, self.config.benchmark, dump_config(self.config))

    def close(self) -> None:
        if self._live is not None:
            self._live.publish(state="closed", force=True)
        if self._cluster is not None and not getattr(self, "_shares_cluster", False):
            self._cluster.close()
        self._cluster = None
        self.models.close()
        if self._benchmark is not None:
            self._benchmark.close()
