"""Shared set-up for the SKILLRL tests: a run over the toy path benchmark with scripted or tiny-model roles."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from evolver import plugins
from evolver.config import Config, RoleConfig
from evolver.programs import ProgramRepo
from evolver.run import Run
from evolver.store import Store

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
for p in (HERE, ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

@pytest.fixture(autouse=True)
def fresh_plugins(monkeypatch, tmp_path):
    """Installed plugins stay out but the engine the trainers run on (SKILLRL is registered explicitly);
    a clean plugin manager per test."""
    monkeypatch.setenv("EVOLVER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EVOLVER_PLUGINS", "transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    plugins.reset()
    yield
    plugins.reset()


LESSON = {"name": "check-the-goal", "description": "Use when the next step of the path is unclear.",
          "where": "the second step", "wrong_action": "wait", "right_action": "the listed path action",
          "rule": "Always take the listed action that moves toward the goal."}
SKILL = {"name": "follow-the-path", "description": "Use when a task asks to use things in order.",
         "steps": ["Read the goal", "Take the listed action that uses the named thing"], "general": False}


def teacher_rule(req):
    """A scripted teacher: a valid skill or lesson for whatever it is asked."""
    text = req.messages[-1].content
    return json.dumps(LESSON if "failure lesson" in text or "not valid" in text and "wrong_action" in text
                      else SKILL)


def make_run(tmp_path, roles: dict | None = None, skillrl: dict | None = None, extra_plugins: dict | None = None,
             benchmark_options: dict | None = None, loop: dict | None = None) -> Run:
    plugins.load_local(HERE / "skillrl_pathbench.py")
    import evolver_skillrl

    if plugins.manager().get_plugin("skillrl") is None:
        plugins.manager().register(evolver_skillrl, name="skillrl")
        plugins._registries = None
    all_roles = {r: RoleConfig(backend="scripted") for r in ("executor", "proposer", "builder", "judge")}
    all_roles.update(roles or {})
    cfg = Config(benchmark="paths", benchmark_options=benchmark_options or {}, store=str(tmp_path / "store"),
                 roles=all_roles, proposers=["skillrl"], loop=loop or {},
                 plugins={"skillrl": {"embedder": "hashing", **(skillrl or {})}, **(extra_plugins or {})})
    store = Store(tmp_path / "store" / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(tmp_path / "store"))
    run.record()
    from evolver.seeding import ensure_seed

    ensure_seed(run)
    return run


def set_backend(run: Run, role: str, backend) -> None:
    """Put ``backend`` behind ``role`` (roles with equal settings share one; give the role its own options)."""
    run.models._backends[run.models._role_key(role)] = backend


def episode(task, actions: list[str], score: float, purpose: str = "train", won: bool | None = None, eid: str = ""):
    from evolver.types import Episode, Step

    steps = [Step(index=i, prompt="[]", output=a, action=a, observation=f"after {a}") for i, a in enumerate(actions)]
    return Episode(task=task, program_id="seed", program_hash="h", model="m", seed=0, steps=steps, score=score,
                   won=score >= 1.0 if won is None else won, purpose=purpose,
                   id=eid or hashlib.sha1(f"{task.id}/{purpose}".encode()).hexdigest()[:16])
