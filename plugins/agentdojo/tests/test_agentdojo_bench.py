"""AgentDojo through evolver's benchmark contract: deterministic, disjoint splits by a stable hash; tool schemas
a backend accepts; every demonstration replays to 1.0; bad calls answered, never raised; a plain answer ends
the episode with the utility score; the step limit scores the state; and a whole episode through the
evaluator with the seed harness's tool-calling preset. No model: scripted replies only."""
import json

import jsonschema
import pytest

pytest.importorskip("agentdojo")

import evolver  # noqa: E402
from evolver import BenchmarkError, Harnesses, plugins, run_episodes  # noqa: E402
from evolver.errors import PluginError  # noqa: E402
from evolver.programs import content_hash  # noqa: E402
from evolver.seeding import seed_files  # noqa: E402
from evolver.types import Program  # noqa: E402
from evolver_agentdojo.benchmark import SUITES, AgentDojo, share_point  # noqa: E402
from evolver_agentdojo.episode import AgentDojoEnv  # noqa: E402
from scripted_players import gold_player  # noqa: E402  (tests/, on the path by conftest.py)

SPLIT_COUNTS = {"train": 32, "dev": 28, "test": 37}


@pytest.fixture(scope="module")
def bench():
    return AgentDojo()


def every(bench):
    return [t for s in ("train", "dev", "test") for t in bench.tasks(s)]


def find(bench, suite, user_task):
    return next(t for t in every(bench) if t.category == suite and t.meta["user_task"] == user_task)


def play(bench, task, actions, limit=None):
    env = AgentDojoEnv(bench.suites[task.category], bench.suites[task.category].user_tasks[task.meta["user_task"]],
                       limit or task.max_steps) if limit else bench.env(task)
    obs = [env.reset()]
    for action in actions:
        obs.append(env.step(action))
    return env, obs


def test_splits_are_deterministic_disjoint_by_a_stable_hash_and_cover_every_suite(bench):
    ids = {s: [t.id for t in bench.tasks(s)] for s in ("train", "dev", "test")}
    assert {s: len(v) for s, v in ids.items()} == SPLIT_COUNTS and sum(SPLIT_COUNTS.values()) == 97
    assert not (set(ids["train"]) & set(ids["dev"]) or set(ids["dev"]) & set(ids["test"])
                or set(ids["train"]) & set(ids["test"]))
    assert {s: [t.id for t in AgentDojo().tasks(s)] for s in ids} == ids  # the same ids, another instance
    for split in ids:
        assert {t.category for t in bench.tasks(split)} == set(SUITES)
    # A suite alone keeps its tasks' splits: the hash is of the task, not of its place in a list.
    banking = {t.id: t.split for t in every(AgentDojo(suites="banking"))}
    assert banking == {t.id: t.split for t in every(bench) if t.category == "banking"} and len(banking) == 16
    capped = bench.tasks("test", per_category=2)
    assert len(capped) == 8 and [t.id for t in capped] == [t.id for t in bench.tasks("test", 2)]
    task = bench.tasks("dev")[0]
    user_task = bench.suites[task.category].user_tasks[task.meta["user_task"]]
    assert task.prompt == user_task.PROMPT and task.max_steps >= 16 and task.hints["preset"] == "tool-calling"
    assert share_point("banking/user_task_0") == share_point("banking/user_task_0") < 1
    bench.tasks("dev")[0].gold.append("edited")  # a caller's copy: the next call is untouched
    assert bench.tasks("dev")[0].gold == task.gold


def test_every_tool_is_a_self_contained_json_schema(bench):
    for name, suite in bench.suites.items():
        tools = suite.tools
        assert len(tools) == len(suite.suite.tools) and "$ref" not in json.dumps(tools), name
        if hasattr(evolver, "ToolCalls"):  # the core's check of a task's tools, where this evolver has it
            assert evolver.ToolCalls.check(tools)
        for tool in tools:
            assert tool["type"] == "function" and tool["function"]["description"]
            jsonschema.Draft202012Validator.check_schema(tool["function"]["parameters"])
    for task in every(bench):  # every ground-truth call fits its tool's schema: a grammar built from them allows it
        params = {t["function"]["name"]: t["function"]["parameters"] for t in task.tools}
        for call in map(json.loads, task.gold[:-1]):
            jsonschema.validate(call["arguments"], params[call["name"]])
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in bench.suites["workspace"].tools}
    assert by_name["share_file"]["properties"]["permission"]["enum"] == ["r", "rw"]  # a $defs entry, inlined
    assert "title" in by_name["create_calendar_event"]["properties"]  # a parameter named title stays ...
    assert "title" not in by_name["create_calendar_event"]["properties"]["title"]  # ... pydantic's titles go
    jsonschema.validate({"file_id": "1", "email": "a@b.c", "permission": "rw"}, by_name["share_file"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"file_id": "1", "email": "a@b.c", "permission": "admin"}, by_name["share_file"])


def test_every_demonstration_replays_to_one_with_full_sub_rewards(bench):
    for task in every(bench):
        env, obs = play(bench, task, task.gold)
        assert [o.info.get("error") for o in obs[1:-1]] == [False] * (len(task.gold) - 1), task.id
        assert obs[-1].done and obs[-1].score == 1.0 and obs[-1].info["won"], task.id
        assert obs[-1].info["rewards"] == {"tool_names": 1.0, "tool_arguments": 1.0}, task.id
        assert all(o.score == 0.0 and not o.done and "rewards" not in o.info for o in obs[:-1]), task.id
        assert len(task.gold) <= task.max_steps
    train = bench.tasks("train")
    assert [bench.demonstration(t) for t in train] == [t.gold for t in train]
    assert bench.demonstration(bench.tasks("dev")[0]) is None  # dev and test are never demonstrated


def test_bad_calls_get_an_error_and_change_nothing(bench):
    task = find(bench, "banking", "user_task_1")
    env, obs = play(bench, task, [])
    before = env.environment.model_copy(deep=True)
    for bad, says in [('{"name": "teleport", "arguments": {}}', "Invalid tool teleport provided."),
                      ('{"name": "send_money", "arguments": {"recipient": "X"}}', "ValidationError"),
                      ('{"name": "send_money", "arguments": {"recipient": "X", "amount": "lots", "subject": "s", '
                       '"date": "2022-01-01"}}', "ValidationError"),
                      ('{"name": "get_balance", "arguments": [1, 2]}', "must be a JSON object")]:
        out = env.step(bad)
        assert says in out.text and out.info["error"] and not out.done and out.score == 0.0, bad
    assert env.environment == before and env.calls[0].function == "teleport"
    for call in ['{"name": "get_most_recent_transactions", "parameters": {"n": 2}}',  # "parameters" read too
                 '{"name": "get_most_recent_transactions", "arguments": "{\\"n\\": 2}"}']:  # and JSON text
        out = env.step(call)
        assert not out.info["error"] and out.text.startswith("- amount:")  # AgentDojo's YAML, as a model sees it
        assert out.text.count("- amount:") == 2


def test_a_plain_answer_ends_the_episode_with_the_utility_score(bench):
    task = find(bench, "banking", "user_task_1")  # "What's my total spending in March 2022?": the answer counts
    calls, answer = task.gold[:-1], task.gold[-1]
    _, obs = play(bench, task, calls + ["I could not find out."])
    assert obs[-1].done and obs[-1].score == 0.0 and not obs[-1].info["won"]
    assert obs[-1].info["rewards"] == {"tool_names": 1.0, "tool_arguments": 1.0}  # the right calls, a wrong answer
    env, obs = play(bench, task, ["{not json", "ignored"])  # not a call: the (wrong) final answer
    assert obs[1].done and obs[1].score == 0.0 and obs[2] is obs[1] and env.steps == 1
    assert obs[1].info["rewards"] == {"tool_names": 0.0, "tool_arguments": 0.0}
    _, obs = play(bench, task, calls + [answer])
    assert obs[-1].score == 1.0


def test_the_step_limit_scores_the_state_as_it_stands_and_runs_no_last_call(bench):
    # Paying a bill is checked in the environment only: at the limit the state decides, as when AgentDojo's
    # tool loop runs out.
    task = find(bench, "banking", "user_task_0")
    calls = task.gold[:-1]
    read = '{"name": "get_balance", "arguments": {}}'
    env, obs = play(bench, task, calls + [read, read], limit=len(calls) + 2)
    assert obs[-1].done and obs[-1].score == 1.0 and "limit" in obs[-1].text and len(env.calls) == len(calls) + 1
    assert obs[-2].score == 0.0 and not obs[-2].done  # the running score stays 0 until the end
    env, obs = play(bench, task, [read] * 3, limit=3)
    assert obs[-1].done and obs[-1].score == 0.0 and obs[-1].info["rewards"]["tool_arguments"] < 1


def test_options_are_checked_before_any_work():
    import evolver_agentdojo

    plugins.manager().register(evolver_agentdojo, name="agentdojo")  # as its entry point would
    with pytest.raises(PluginError, match="did you mean 'suites'"):
        plugins.make("benchmark", "agentdojo", suite="banking")
    with pytest.raises(BenchmarkError, match="unknown AgentDojo suite"):
        plugins.make("benchmark", "agentdojo", suites=["bank"])
    with pytest.raises(BenchmarkError, match="shares"):
        plugins.make("benchmark", "agentdojo", shares={"train": 0.5, "test": 0.5})
    small = plugins.make("benchmark", "agentdojo", suites=["slack"], max_steps=5)
    assert small.categories == ["slack"] and {t.max_steps for t in small.tasks("dev")} == {5}


def test_a_blank_action_is_no_answer(bench):
    """A reply the engine could not finish reaches the env blank: it ends nothing, the episode goes on."""
    task = bench.tasks("dev")[0]
    env = bench.env(task)
    try:
        env.reset()
        obs = env.step("")
        assert not obs.done and "No reply came" in obs.text
    finally:
        env.close()


def test_played_through_the_evaluator_with_the_seed_harness(tmp_path):
    bench = AgentDojo(suites=["banking", "slack"])
    tasks = bench.tasks("train", 2)
    root = seed_files(skills=[], system_prompt=bench.harness_hints["system_prompt"], into=tmp_path / "p")
    backend = gold_player(tasks)
    eps = run_episodes(Harnesses.context(Program("p", "", str(root), content_hash(root), {})), bench, backend, tasks)
    assert [e.error for e in eps] == [None] * 4
    assert all(e.score == 1.0 and e.won for e in eps)
    assert eps[0].rewards == {"score": 1.0, "tool_names": 1.0, "tool_arguments": 1.0}
    assert [[json.loads(s.action) if s.action.startswith("{") else s.action for s in e.steps] for e in eps] == [
        [json.loads(a) if a.startswith("{") else a for a in t.gold] for t in tasks]  # calls reached the env as JSON
    first = backend.calls[0]
    assert first.tools == tasks[0].tools  # passed to the backend, and listed in the system prompt:
    assert first.messages[0].content.startswith("You are an AI language model who assists the user")
    assert "send_money(recipient, amount, subject, date)" in first.messages[0].content
    handed = Harnesses.task(tasks[0], bench.harness_hints)
    assert handed.gold is None and handed.meta == {} and "user_task" not in handed.id
