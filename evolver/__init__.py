"""evolver's public API: every name a plugin may import, and nothing else.

A plugin imports from ``evolver`` only (``from evolver import hookimpl, Benchmark, Env, Task``), never from
a module inside it, and never a name that starts with ``_``: modules may move, these names stay
(``tests/test_public_api.py`` holds first-party plugins to it). Each name's docstring is its contract; the
hooks are in ``docs/plugins.md``.

Names load on first use (PEP 562), so ``import evolver`` costs a millisecond: a name whose module needs
DuckDB or click pulls it in only when a plugin asks for that name. Nothing here needs torch: the local
model engines are plugins (``evolver_transformers`` holds their helpers: precision, KV reuse, the
embedded model's weights).
"""
from __future__ import annotations

import importlib

#: Where each public name lives: module, or ``module:attribute`` when the public name differs.
_API: dict[str, str] = {
    # -- hooks: ``@hookimpl`` marks a plugin's hook implementations (the specs: evolver.hookspecs)
    "hookimpl": "evolver.hookspecs",
    # -- the nouns that cross plugin boundaries (plain dataclasses)
    **dict.fromkeys(["Task", "Observation", "Message", "GenRequest", "GenResult", "ChoiceRequest", "ChoiceResult",
                     "Step", "Episode", "Program", "Proposal", "Candidate", "Evaluation", "stable_hash"],
                    "evolver.types"),
    # -- errors: a plugin raises these for what a user can fix; the CLI prints them without a traceback
    **dict.fromkeys(["EvolverError", "ConfigError", "PluginError", "UnknownNameError", "SkillError",
                     "StoreLockedError", "StoreIOError", "QueryError", "ProgramRepoError", "RepoDamagedError",
                     "BackendError", "BenchmarkError"],
                    "evolver.errors"),
    # -- the interfaces registered objects implement
    **dict.fromkeys(["Backend", "render_plain"], "evolver.backends.base"),
    "SampledBackend": "evolver.backends.sampling",
    **dict.fromkeys(["Benchmark", "Env", "SPLITS"], "evolver.benchmarks.base"),
    **dict.fromkeys(["EnvPool", "PooledEnv"], "evolver.envpool"),  # simulators with one episode per process
    **dict.fromkeys(["Proposer", "ProposeContext", "Draft"], "evolver.proposers"),
    "Trainer": "evolver.trainers",
    **dict.fromkeys(["HARNESS_INTERFACE", "Action", "ProgramContext", "program_context", "SEED_DIR", "make_harness",
                     "task_for_harness"],
                    "evolver.harness"),
    "SandboxedHarness": "evolver.harness_sandbox",  # a candidate's harness in a process of its own
    # -- the run handle and the workspace it works in
    "Run": "evolver.run",
    **dict.fromkeys(["Config", "ROLES", "plugin_options"], "evolver.config"),
    "Store": "evolver.store",
    **dict.fromkeys(["ProgramRepo", "content_hash"], "evolver.programs"),
    "Frontier": "evolver.frontier",
    **dict.fromkeys(["open_workspace", "open_run", "DB_FILE"], "evolver.workspace"),
    "ensure_seed": "evolver.loop",
    "make_plugin": "evolver.plugins:make",
    "store_json": "evolver.store_schema:dumps",
    # -- skills (the Agent Skills format) and their checks
    **dict.fromkeys(["Skill", "SkillCaps", "parse_skill", "validate_skill", "load_skills", "check_skills",
                     "write_skill", "check_name", "render_index", "relevant", "tokens", "shipped_skill",
                     "shipped_skills_dir", "seed_skill_folders", "pack_folders", "hand_written"],
                    "evolver.skills"),
    "content_problems": "evolver.skill_quality",
    # -- text embeddings for retrieval and dedup (a dense model loads only when asked for)
    **dict.fromkeys(["load_embedder", "SentenceEmbedder", "HashingEmbedder", "cosine"], "evolver.embeddings"),
    **dict.fromkeys(["check_skill_files", "audit_leakage"], "evolver.checks"),
    # -- playing episodes: evaluation, demonstrations, ablations
    **dict.fromkeys(["run_episodes", "evaluate_many", "summarize", "Job", "REPLAY_DIVERGED"], "evolver.evaluate"),
    **dict.fromkeys(["Cluster", "share_weights"], "evolver.remote"),  # cluster engines; weights to their workers
    **dict.fromkeys(["has_gold", "replay_gold", "replay_episodes"], "evolver.demonstrations"),
    "variant": "evolver.conditions",
    # -- what proposers show a model: traces, and read-only tools over a folder and the store
    **dict.fromkeys(["format_episode", "brief_step", "gold_text"], "evolver.trace_format"),
    **dict.fromkeys(["Tools", "converse"], "evolver.proposer_tools"),
    # -- reports: what a report format (hook register_report_formats) is handed
    **dict.fromkeys(["text_table", "ReportContext"], "evolver.report"),
    # -- long work's progress: a bar with an ETA on a terminal, throttled plain lines elsewhere
    "progress": "evolver.progressbar",
}

__all__ = list(_API)


def __getattr__(name: str) -> object:
    """Load a public name on first use and keep it (later lookups are plain attribute reads)."""
    where = _API.get(name)
    if where is None:
        raise AttributeError(f"module 'evolver' has no attribute {name!r}")
    module, _, attr = where.partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
