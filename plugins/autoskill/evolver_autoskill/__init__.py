"""AutoSkill for evolver: lifelong skills from interactions (``evolver serve``), hybrid retrieval for any
run (``[plugins.autoskill] retrieval_in_runs = true``), git-versioned merges gated on outcomes.

Imports are lazy: loading the plugin must not cost ``evolver --help`` a torch import.
"""
from __future__ import annotations

import threading

from evolver import hookimpl

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []

_RUN_RETRIEVERS: dict[tuple, object] = {}
_RUN_LOCK = threading.Lock()


@hookimpl
def register_commands(cli):
    from evolver_autoskill.cli import autoskill_group, serve

    cli.add_command(serve)
    cli.add_command(autoskill_group)


@hookimpl
def register_migrations(register):
    from evolver_autoskill.schema import MIGRATIONS

    register("autoskill", MIGRATIONS)


@hookimpl
def on_run_start(run):
    """Load the embedder before any episode starts: the harness's ``start`` (which asks select_skills)
    runs under a 10 s deadline, and a first model load must not spend it."""
    from evolver_autoskill.options import load_options

    options = load_options(run.config)
    if options.retrieval_in_runs:
        from evolver import load_embedder

        load_embedder(options.embedder)


@hookimpl
def select_skills(run, task, program, skills, k):
    """Inject the program's skills that the hybrid retriever ranks for this task (opt-in per run, so an
    installed plugin never changes a run that did not ask for it). Decisions go to the run's store."""
    if run is None or not skills:
        return None
    from evolver_autoskill.options import load_options

    options = load_options(run.config)
    if not options.retrieval_in_runs:
        return None
    from evolver_autoskill import records
    from evolver_autoskill.card import card_from_skill
    from evolver import load_embedder
    from evolver_autoskill.retrieval import HybridRetriever, RetrievalConfig

    key = (program.hash, k, options.embedder, options.lam, options.eta, options.dense_floor)
    with _RUN_LOCK:
        retriever = _RUN_RETRIEVERS.get(key)
        if retriever is None:
            config = RetrievalConfig(lam=options.lam, eta=options.eta, top_k=k, dense_floor=options.dense_floor)
            retriever = HybridRetriever(load_embedder(options.embedder), config).index(
                [card_from_skill(s) for s in skills])
            _RUN_RETRIEVERS[key] = retriever
    found = retriever.retrieve(f"{task.category} {task.prompt}")
    store = getattr(run, "store", None)
    if store is not None:
        records.log_retrieval(store, f"run-{run.id}", "run", f"{run.id}/{program.id}/{task.id}", found)
    by_name = {s.name: s for s in skills}
    return [by_name[c.name] for c in found.injected if c.name in by_name][:k]
