"""A benchmark with no verifier (its environment scores every reply 0) whose tasks carry a rubric, and
scripted judges: shared by the judge-scored task tests (tests/test_judge.py, plugins/grpo/tests)."""
from __future__ import annotations

import re

from evolver.backends.scripted import ScriptedBackend
from evolver.benchmarks.base import Benchmark, Env
from evolver.config import Config, RoleConfig
from evolver.harness import make_harness, program_context
from evolver.seeding import seed_files
from evolver.programs import content_hash
from evolver.run import Run
from evolver.store import Store
from evolver.types import Observation, Program, Task

RUBRIC = "The reply thanks the customer and offers a refund."
GOOD = "GOOD reply: thank you, here is your refund"
BAD = "bad reply: go away"


class ReplyEnv(Env):
    def __init__(self, task: Task):
        self.task = task

    def reset(self) -> Observation:
        return Observation(self.task.prompt)

    def step(self, action: str) -> Observation:
        return Observation("The customer read the reply.", score=0.0, done=True)


class ReplyBench(Benchmark):
    """``rubric``: False leaves the tasks to their environment (which scores every reply 0)."""

    name = "replies"
    categories = ["support"]
    harness_hints = {"preset": "chat"}

    def __init__(self, n: int = 2, rubric: bool = True):
        self.n, self.with_rubric = n, rubric

    def tasks(self, split, per_category=None):
        meta = {"rubric": RUBRIC} if self.with_rubric else {}
        return [Task(id=f"replies/{split}/{i}", benchmark="replies", split=split, category="support", seed=i,
                     prompt=f"Customer {i}: my parcel arrived broken.", meta=dict(meta)) for i in range(self.n)]

    def env(self, task):
        return ReplyEnv(task)


def attempts(request) -> list[str]:
    """The attempts a judge's request shows, in the order shown."""
    text = request.messages[-1].content
    body = text.split("what it was told back.\n\n", 1)[1].rsplit("\n\nScore ", 1)[0]
    return re.split(r"(?:^|\n\n)Attempt \d+:\n", body)[1:]


def fair_judge(request) -> str:
    """Scores an attempt 9 when it is the planted good one, else 2, wherever it is shown."""
    return "\n".join(f"Attempt {k}: {9 if 'GOOD' in a else 2}" for k, a in enumerate(attempts(request), 1))


def first_shown_judge(request) -> str:
    """Prefers whatever it is shown first: all position, no content."""
    return "\n".join(f"Attempt {k}: {10 if k == 1 else 0}" for k in range(1, len(attempts(request)) + 1))


def program(tmp_path, name: str = "p") -> Program:
    root = tmp_path / name
    seed_files(into=root)
    return Program(name, "", str(root), content_hash(root), {})


def make_run(tmp_path, judge_rule) -> Run:
    """A run with its store, the judge role played by ``judge_rule``, harnesses in this process."""
    roles = {"judge": RoleConfig(backend="scripted", model="judge-script", options={"rule": judge_rule})}
    cfg = Config(benchmark="basic", store=str(tmp_path / "store"), roles=roles,
                 loop={"monitor": "off", "sandbox_harness": False})
    run = Run(cfg, Store(tmp_path / "store" / "evolver.duckdb"), None)
    run.record()
    return run


def player(text: str, name: str) -> ScriptedBackend:
    return ScriptedBackend(rule=lambda req: text, model=name)


def harness(ctx):
    return make_harness(ctx)


def context(tmp_path, name: str = "p"):
    return program_context(program(tmp_path, name))
