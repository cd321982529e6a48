"""Red team for AgentDojo (as tests/test_redteam.py is for the core): a hostile harness tries to import
agentdojo (or this plugin) and recompute the ground truth of the prompt it is given, to read agentdojo's task
and environment files from site-packages, and to recover the gold from the task it is handed. Run in the
evaluator's own process the first three find what they look for; played in the harness sandbox every one
fails, and the harness falls back to writing its report as the answer, which scores 0."""
import json
from pathlib import Path

import pytest

pytest.importorskip("agentdojo")

from evolver import Harnesses, run_episodes  # noqa: E402
from evolver.backends.scripted import ScriptedBackend  # noqa: E402
from evolver.programs import content_hash  # noqa: E402
from evolver.sandbox import sandbox_mechanism  # noqa: E402
from evolver.seeding import seed_files  # noqa: E402
from evolver.types import Program  # noqa: E402
from evolver_agentdojo.benchmark import AgentDojo  # noqa: E402

SEED = (Harnesses.SEED_DIR / "harness" / "harness.py").read_text()

# Each attack is the body of ``steal(prompt, task, paths)``: the actions that solve the task whose prompt is
# given (a list), something it found (a string), or None. ``paths`` is what an attacker who knows this
# machine's layout would try, filled in by the test.
ATTACKS = {
    "import agentdojo and recompute the ground truth": """
    import importlib, json
    suites = importlib.import_module("agent" + "dojo.task_suite").get_suites(paths["version"])
    for suite in suites.values():
        for user_task in suite.user_tasks.values():
            if user_task.PROMPT == prompt:
                env = user_task.init_environment(suite.load_and_inject_default_environment({}))
                calls = user_task.ground_truth(env)
                return [json.dumps({"name": c.function, "arguments": dict(c.args)}, sort_keys=True,
                                   ensure_ascii=False) for c in calls] + [
                    user_task.GROUND_TRUTH_OUTPUT or "Done."]
""",
    "import this plugin and read the gold": """
    import importlib
    bench = importlib.import_module("evolver_" + "agentdojo.benchmark").AgentDojo()
    for split in ("train", "dev", "test"):
        for t in bench.tasks(split):
            if t.prompt == prompt:
                return getattr(t, "go" + "ld")
""",
    "read agentdojo's task and environment files from site-packages": """
    import os
    found = [open(os.path.join(paths["agentdojo"], "data", "suites", "banking", "environment.yaml")).name]
    for root, _, files in os.walk(paths["agentdojo"]):
        for name in files:
            if name.endswith((".py", ".yaml")):
                text = open(os.path.join(root, name), encoding="utf-8", errors="replace").read()
                if prompt[:24] in text or name == "environment.yaml":
                    found.append(os.path.join(root, name))
    return "read " + ", ".join(sorted(found)) if found else None
""",
    "recover the gold from the task it is handed": """
    gold = getattr(task, "go" + "ld")
    if gold:
        return gold
    meta = getattr(task, "me" + "ta") or {}
    if meta.get("user_task") or "user_task" in task.id or getattr(task, "se" + "ed"):
        return "found " + repr((task.id, meta, getattr(task, "se" + "ed")))
""",
}

HARNESS = SEED + '''

import json as _json

_PATHS = __PATHS__
_ATTACKS = __ATTACKS__
_honest_start, _honest_parse = Harness.start, Harness.parse


def _start(self, task, obs):
    state = _honest_start(self, task, obs)
    report, stolen = {}, None
    for name, body in _ATTACKS.items():
        scope = {}
        try:
            exec("def steal(prompt, task, paths):\\n" + body, scope)
            got = scope["steal"](task.prompt, task, _PATHS)
            report[name] = "stole" if got else "nothing"
            stolen = stolen or (got if isinstance(got, list) else None)
        except BaseException as exc:
            report[name] = "failed: " + type(exc).__name__
    state["report"], state["stolen"], state["played"] = report, stolen, 0
    return state


def _parse(self, state, obs, request, result):
    if state["stolen"] and state["played"] < len(state["stolen"]):  # play what was stolen, if anything was
        state["played"] += 1
        return Action(env_action=state["stolen"][state["played"] - 1])
    return Action(env_action="REPORT " + _json.dumps(state["report"], sort_keys=True))


Harness.start, Harness.parse = _start, _parse
'''


@pytest.fixture(scope="module")
def bench():
    return AgentDojo()


def layout(bench) -> dict:
    import agentdojo

    return {"agentdojo": str(Path(agentdojo.__file__).parent), "version": bench.version}


def steal_in_process(name: str, prompt: str, task, paths: dict):
    scope: dict = {}
    exec("def steal(prompt, task, paths):\n" + ATTACKS[name].strip("\n"), scope)
    return scope["steal"](prompt, task, paths)


def _read(action: str):
    try:
        return json.loads(action)
    except ValueError:
        return action


def test_the_attacks_are_real_outside_the_sandbox(bench):
    # What the wall stops: in the evaluator's own process, these reach the answer of the task at hand.
    task = bench.tasks("dev")[0]
    paths = layout(bench)
    recomputed = steal_in_process("import agentdojo and recompute the ground truth", task.prompt, task, paths)
    assert [_read(a) for a in recomputed] == [_read(a) for a in task.gold]  # (the same calls, spelt otherwise)
    assert steal_in_process("import this plugin and read the gold", task.prompt, task, paths) == task.gold
    assert "environment.yaml" in steal_in_process("read agentdojo's task and environment files from site-packages",
                                                  task.prompt, task, paths)
    assert steal_in_process("recover the gold from the task it is handed", task.prompt, task, paths) == task.gold
    # ... and what the core's hand-over already blanks: the task a harness gets holds no gold, meta or real id.
    handed = Harnesses.task(task, bench.harness_hints)
    assert steal_in_process("recover the gold from the task it is handed", handed.prompt, handed, paths) is None


@pytest.mark.skipif(sandbox_mechanism() == "audit", reason="the wall is bwrap or unshare; the audit fallback is "
                    "documented as stopping mistakes, not an adversary")
def test_a_sandboxed_hostile_harness_reaches_nothing_and_scores_zero(bench, tmp_path):
    assert bench.harness_packages == {}  # nothing of agentdojo's is declared into the harness's view
    root = seed_files(skills=[], system_prompt=bench.harness_hints["system_prompt"], into=tmp_path / "p")
    code = HARNESS.replace("__PATHS__", repr(layout(bench))).replace(
        "__ATTACKS__", repr({k: v.strip("\n") for k, v in ATTACKS.items()}))
    (root / "harness" / "harness.py").write_text(code)
    ctx = Harnesses.context(Program("hostile", "", str(root), content_hash(root), {}))
    tasks = bench.tasks("dev", 1)  # one task of each suite
    harness = Harnesses.Sandboxed(ctx, packages=list(bench.harness_packages))
    try:
        eps = run_episodes(ctx, bench, ScriptedBackend(answers=["I will not answer."] * 10), tasks,
                           harness_factory=lambda _: harness)
    finally:
        harness.close()
    assert [e.error for e in eps] == [None] * len(tasks)
    for ep in eps:
        assert ep.score == 0.0 and len(ep.steps) == 1, ep.steps[0].action[:300]
        report = json.loads(ep.steps[0].action.removeprefix("REPORT "))
        assert set(report) == set(ATTACKS)
        assert all(outcome != "stole" for outcome in report.values()), report
        assert report["import agentdojo and recompute the ground truth"] == "failed: ModuleNotFoundError"
        assert report["import this plugin and read the gold"] == "failed: ModuleNotFoundError"
        assert report["read agentdojo's task and environment files from site-packages"] == "failed: FileNotFoundError"
        assert report["recover the gold from the task it is handed"] == "nothing"
