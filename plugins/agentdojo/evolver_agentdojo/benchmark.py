"""AgentDojo (Debenedetti et al., 2024) as an evolver benchmark: every user task of the chosen suites, played
without prompt injections (utility only), scored by the task's own utility check.

Tasks: one per AgentDojo user task; the category is its suite. Splits: a task's place in train / dev / test
is a stable hash of ``suite/user_task_N`` against ``shares``, so a task never moves when another is added or a
suite is left out, and another benchmark version keeps the same splits. ``Task.tools`` are the suite's functions as
OpenAI function schemas, self-contained (pydantic's ``$defs`` inlined, its generated titles dropped: they only
repeat the names and cost a small model's context). ``Task.gold`` is the demonstration: the ground-truth calls
(``user_task.ground_truth(pre_environment)``) as canonical JSON call texts, then a final answer.

The harness sees the tool-calling preset, AgentDojo's default system message and the user's request; never
the environment, the ground truth or the checks, which stay in the evaluator (``episode.py``).
"""
from __future__ import annotations

import dataclasses
import hashlib

from evolver import SPLITS, Benchmark, BenchmarkError, Task

from evolver_agentdojo.episode import AgentDojoEnv, call_action

SUITES = ("workspace", "travel", "banking", "slack")
VERSION = "v1.2.2"  # the newest benchmark version agentdojo 0.1.35 ships
SHARES = {"train": 0.3, "dev": 0.3, "test": 0.4}  # 32 / 28 / 37 of the 97 tasks, every suite in every split
# Step limit: AgentDojo's agent gets one model turn, then at most 15 more in its tool loop (ToolsExecutionLoop,
# max_iters=15): 16 turns. A turn there may hold several calls and here holds one, so a task whose ground truth
# alone needs more calls (one travel task has 18) gets those, the answer and SPARE more.
TURNS = 16
SPARE = 3
#: The final answer of a demonstration whose task names none (GROUND_TRUTH_OUTPUT is empty): its utility
#: check reads the environment only.
NEUTRAL_ANSWER = "Done: the task is complete."
#: How this benchmark's episodes end, said once after AgentDojo's own system message (which assumes a client
#: that knows it): the seed harness's tool list says how to call a tool.
PROTOCOL = ("When the task is done, reply in plain text (not JSON) with your answer for the user: "
            "that reply ends the task.")


def _agentdojo():
    """agentdojo's task suites and system message; imported on first use (it pulls in its LLM clients)."""
    try:
        from agentdojo.agent_pipeline.agent_pipeline import load_system_message
        from agentdojo.task_suite import get_suites
    except ImportError as exc:
        raise BenchmarkError(f"the agentdojo benchmark needs the agentdojo package ({exc}): "
                             "pip install -e plugins/agentdojo") from exc
    return get_suites, load_system_message


def share_point(key: str) -> float:
    """A stable point in [0, 1) for ``key``: where the task falls among the splits' shares."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:13], 16) / 16 ** 13


def tool_schema(function) -> dict:
    """One AgentDojo Function as an OpenAI function schema, self-contained."""
    schema = function.parameters.model_json_schema()
    params = _inline(schema, schema.pop("$defs", {}), 0)
    params.setdefault("properties", {})
    return {"type": "function", "function": {"name": function.name, "description": function.description,
                                             "parameters": params}}


_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties", "not")


def _inline(schema, defs: dict, depth: int):
    """``schema`` with every ``#/$defs/X`` reference replaced by X (siblings such as a description kept) and
    pydantic's generated ``title`` keywords dropped. Walks schema positions only, so a property that is itself
    called "title" (create_calendar_event has one) stays."""
    if not isinstance(schema, dict):
        return schema
    if depth > 32:
        raise BenchmarkError("an AgentDojo tool schema refers to itself; it cannot be inlined")
    out = dict(schema)
    ref = out.pop("$ref", None)
    if ref is not None:
        name = ref.removeprefix("#/$defs/")
        if name not in defs:
            raise BenchmarkError(f"an AgentDojo tool schema refers to {ref}, which it does not define")
        out = {**_inline(defs[name], defs, depth + 1), **out}
    if isinstance(out.get("title"), str):
        del out["title"]
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _inline(v, defs, depth + 1) for k, v in out["properties"].items()}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_inline(v, defs, depth + 1) for v in out[key]]
    for key in _SUBSCHEMAS:
        if isinstance(out.get(key), dict):
            out[key] = _inline(out[key], defs, depth + 1)
    return out


class Suite:
    """One AgentDojo suite: its default environment (loaded once, never played on), tools and user tasks."""

    def __init__(self, name: str, suite):
        self.name, self.suite = name, suite
        self.user_tasks = suite.user_tasks
        # No injections: every injection vector keeps its benign default text.
        self.default = suite.load_and_inject_default_environment({})
        self.tools = [tool_schema(f) for f in suite.tools]

    def pre_environment(self, user_task):
        """The environment an episode of ``user_task`` starts from, a fresh deep copy (as AgentDojo's
        run_task_with_pipeline builds it: the default environment, then the task's init_environment)."""
        return user_task.init_environment(self.default.model_copy(deep=True))

    def demonstration(self, user_task) -> list[str]:
        """The ground-truth calls from an episode's pre-environment, as call texts, then the final answer."""
        calls = user_task.ground_truth(self.pre_environment(user_task))
        return [call_action(c.function, dict(c.args), self.tools) for c in calls] + [
            user_task.GROUND_TRUTH_OUTPUT or NEUTRAL_ANSWER]


class AgentDojo(Benchmark):
    name = "agentdojo"
    max_steps = TURNS

    def __init__(self, suites: list[str] | str | None = None, version: str = VERSION,
                 shares: dict[str, float] | None = None, max_steps: int | None = None):
        names = [suites] if isinstance(suites, str) else list(suites or SUITES)
        unknown = [n for n in names if n not in SUITES]
        if unknown or not names:
            raise BenchmarkError(f"unknown AgentDojo suite(s) {unknown}; choose from {list(SUITES)}")
        self.shares = dict(shares or SHARES)
        values = list(self.shares.values())
        if set(self.shares) != set(SPLITS) or min(values) < 0 or abs(sum(values) - 1) > 1e-6:
            raise BenchmarkError(f"shares must give train, dev and test each a share, adding up to 1; got {shares}")
        get_suites, load_system_message = _agentdojo()
        available = get_suites(version)
        if not available:
            raise BenchmarkError(f"agentdojo has no benchmark version {version!r}")
        self.version, self.categories = version, names
        self.fixed_steps = int(max_steps) if max_steps else None
        self.max_steps = self.fixed_steps or TURNS
        self.suites = {n: Suite(n, available[n]) for n in names}
        # AgentDojo's default system message, whose YAML keeps a line continuation ("tools. \<newline>") as text
        system = load_system_message(None).strip().replace(" \\\n", " ") + "\n" + PROTOCOL
        self.harness_hints = {"preset": "tool-calling", "system_prompt": system}
        self._tasks = [self._task(s, tid, ut) for s in self.suites.values() for tid, ut in s.user_tasks.items()]
        self._tasks.sort(key=lambda t: (names.index(t.category), t.meta["point"]))

    def _task(self, suite: Suite, tid: str, user_task) -> Task:
        key = f"{suite.name}/{tid}"
        point = share_point(key)
        train, dev = self.shares["train"], self.shares["dev"]
        split = "train" if point < train else "dev" if point < train + dev else "test"
        gold = suite.demonstration(user_task)
        limit = self.fixed_steps or max(TURNS, len(gold) + SPARE)  # gold: the calls and the answer
        return Task(id=f"agentdojo/{self.version}/{key}", benchmark=self.name, split=split, category=suite.name,
                    seed=int(tid.rsplit("_", 1)[-1]), prompt=user_task.PROMPT, gold=gold, tools=suite.tools,
                    max_steps=limit, hints={"preset": "tool-calling"},
                    meta={"suite": suite.name, "user_task": tid, "version": self.version, "point": point,
                          "difficulty": user_task.DIFFICULTY.name.lower()})

    def tasks(self, split: str, per_category: int | None = None) -> list[Task]:
        if split not in SPLITS:
            raise BenchmarkError(f"unknown split {split!r}; use train, dev or test")
        out, taken = [], dict.fromkeys(self.categories, 0)
        for task in self._tasks:  # by suite, then by hash point: per_category takes a spread, not the first N
            if task.split == split and (per_category is None or taken[task.category] < per_category):
                taken[task.category] += 1  # a copy: a caller that edits its task edits only its own
                out.append(dataclasses.replace(task, gold=list(task.gold), meta=dict(task.meta),
                                               hints=dict(task.hints)))
        return out

    def env(self, task: Task) -> AgentDojoEnv:
        suite = self.suites.get(task.meta.get("suite"))
        user_task = suite.user_tasks.get(task.meta.get("user_task")) if suite else None
        if user_task is None:
            raise BenchmarkError(f"task {task.id!r} is not one of this benchmark's ({self.categories}, {self.version})")
        return AgentDojoEnv(suite, user_task, task.max_steps or self.max_steps)
