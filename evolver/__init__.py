"""evolver's public API: every name a plugin may import, and nothing else.

A plugin imports from ``evolver`` only (``from evolver import hookimpl, Benchmark, Env, Task``), never from
a module inside it, and never a name that starts with ``_``: modules may move, these names stay
(``tests/test_public_api.py`` holds first-party plugins to it, and the API to at most 60 names). Each name's
docstring is its contract (a constant's is its entry in ``_CONSTANTS``); related helpers are one name, a
namespace class (``Skills.parse``, ``Harnesses.make``, ``Demos.replay_gold``); the hooks are in
``docs/plugins.md``. A plugin uses another plugin the same way: only the names in that package's ``__all__``.

Names load on first use (PEP 562), so ``import evolver`` costs a millisecond: a name whose module needs
DuckDB or click pulls it in only when a plugin asks for that name. Nothing here needs torch: the local
model engines are plugins (``evolver_transformers`` holds their helpers: precision, KV reuse, the
embedded model's weights).
"""
from __future__ import annotations

from evolver.lazy import lazy_names

#: Where each public name lives: module, or ``module:attribute`` when the public name differs.
_API: dict[str, str] = {
    # -- hooks: ``@hookimpl`` marks a plugin's hook implementations (the specs: evolver.hookspecs)
    "hookimpl": "evolver.hookspecs",
    # -- the nouns that cross plugin boundaries (plain dataclasses)
    **dict.fromkeys(["Task", "Observation", "Message", "GenRequest", "GenResult", "ChoiceRequest", "ChoiceResult",
                     "Step", "Episode", "Program"],
                    "evolver.types"),
    # -- errors: a plugin raises these for what a user can fix; the CLI prints them without a traceback
    **dict.fromkeys(["EvolverError", "ConfigError", "UnknownNameError", "SkillError", "ProgramRepoError",
                     "BackendError", "BenchmarkError"],
                    "evolver.errors"),
    # -- the interfaces registered objects implement (``Backend.render_plain``: a transcript without a template)
    "Backend": "evolver.backends.base",
    "SampledBackend": "evolver.backends.sampling",
    **dict.fromkeys(["Benchmark", "Env", "SPLITS"], "evolver.benchmarks.base"),
    **dict.fromkeys(["EnvPool", "PooledEnv"], "evolver.envpool"),  # simulators with one episode per process
    "Proposer": "evolver.proposers",
    "Trainer": "evolver.trainers",
    "Cluster": "evolver.remote",  # cluster engines (hook register_clusters)
    "Harnesses": "evolver.harness_sandbox",  # a program's harness outside the evaluator, in-process or sandboxed
    # -- the run handle and the workspace it works in
    "Run": "evolver.run",
    **dict.fromkeys(["ROLES", "plugin_options"], "evolver.config"),
    "Store": "evolver.store",
    "ProgramRepo": "evolver.programs",  # ``ProgramRepo.content_hash(folder)``: the evaluation cache's key
    "lazy_names": "evolver.lazy",  # a package's PEP 562 loader: plugins export names without importing torch
    **dict.fromkeys(["open_workspace", "open_run", "DB_FILE"], "evolver.workspace"),
    "make_plugin": "evolver.plugins:make",
    "store_json": "evolver.store_schema:dumps",
    # -- skills (the Agent Skills format) and their checks
    **dict.fromkeys(["Skill", "SkillCaps", "Skills"], "evolver.skills"),
    # -- tools a task declares and the calls a model makes (``ToolCalls.check``, ``.schema``, ``.validate``)
    "ToolCalls": "evolver.tool_calls",
    "SkillChecks": "evolver.checks",
    # -- text embeddings for retrieval and dedup (a dense model loads only when asked for)
    **dict.fromkeys(["load_embedder", "cosine"], "evolver.embeddings"),
    # -- playing episodes: evaluation, demonstrations, ablations
    **dict.fromkeys(["run_episodes", "evaluate_many", "summarize", "Job"], "evolver.evaluate"),
    "REPLAY_DIVERGED": "evolver.lockstep",
    "share_weights": "evolver.remote",  # new weights to a cluster's workers
    "Demos": "evolver.demonstrations",
    "variant": "evolver.conditions",
    # -- what proposers show a model: traces, and read-only tools over a folder and the store (``Tools.converse``)
    "Traces": "evolver.trace_format",
    "Tools": "evolver.proposer_tools",
    # -- reports: what a report format (hook register_report_formats) is handed
    **dict.fromkeys(["text_table", "ReportContext"], "evolver.report"),
    # -- long work's progress: a bar with an ETA on a terminal, throttled plain lines elsewhere
    "progress": "evolver.progressbar",
}

#: What each public constant means: a constant has no docstring of its own (tests/test_public_api.py holds
#: every public name that is neither a class nor a function to an entry here).
_CONSTANTS: dict[str, str] = {
    "SPLITS": "The task splits a benchmark serves: train (proposers learn from it), dev (admission), test "
              "(the final report only).",
    "ROLES": "The model roles a run configures (``[roles.NAME]``: a backend and a model each); "
             "``run.backend(ROLE)`` is the one a role names.",
    "DB_FILE": "The trace store's file name inside a workspace (next to programs/, worktrees/, reports/).",
    "REPLAY_DIVERGED": "Part of an episode's error when a replayed step's prompt differs from the recorded "
                       "one (Job.replay): the recorded reply no longer answers it.",
}

__all__ = list(_API)


__getattr__ = lazy_names(__name__, globals(), _API)  # loaded on first use: no torch at import


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
