"""Every retrieval decision, one JSON line each, in ``<store>/skillrl/retrievals.jsonl``.

The system prompt in each step's trace shows which bodies were injected; this log says *why*: each
task-specific skill's similarity, what was left out and for which reason (δ, top-K, token budget),
and the caller's room. One line per (run, program, task, room) in a process, not one per rollout:
the G rollouts of a group see the same bank and make the same decision. DuckDB reads it as a table:

    evolver traces "SELECT task_id, chosen, skipped FROM read_json_auto('store/skillrl/retrievals.jsonl')"
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

_LOCK = threading.Lock()
_SEEN: set[tuple] = set()


def log_path(run) -> Path:
    return Path(run.config.store) / "skillrl" / "retrievals.jsonl"


def record(run, program, task, k, found) -> None:
    key = (getattr(run, "id", ""), program.hash, task.id, k)
    with _LOCK:
        if key in _SEEN:
            return
        if len(_SEEN) > 100_000:
            _SEEN.clear()
        _SEEN.add(key)
        row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "run_id": getattr(run, "id", ""),
               "program_id": program.id, "program_hash": program.hash, "task_id": task.id,
               "category": task.category, "split": task.split, "room": k,
               "chosen": [s.name for s in found.skills], "scores": found.scores, "skipped": found.skipped}
        path = log_path(run)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
