"""The benchmark contract (evolver/benchmarks/base.py): what the seed harness shows for each preset, token
budgets with visible cuts, tool calls (the preset a task with tools gets, its first call required, noted
calls followed when they validate), per-task step limits, the live-Env cap, and the docstring kept true."""
import json
import re
from pathlib import Path

from evolver.backends.scripted import ScriptedBackend
from evolver.benchmarks import base
from evolver.benchmarks.base import Benchmark, Env
from evolver.evaluate import run_episodes
from evolver.harness import program_context
from evolver.seeding import seed_files
from evolver.programs import content_hash
from evolver.types import ChoiceRequest, GenRequest, GenResult, Observation, Program, Task

TOOLS = [{"type": "function", "function": {"name": "lookup_order", "description": "Find an order by id.",
                                            "parameters": {"type": "object", "properties": {"order_id": {}}}}}]


class SupportEnv(Env):
    """A customer writes; the agent answers or calls lookup_order; the ticket closes on "DONE"."""

    def __init__(self, task, bench):
        self.task, self.bench = task, bench

    def reset(self):
        self.bench.open += 1
        self.bench.most_open = max(self.bench.most_open, self.bench.open)
        return Observation("Customer: my order 7 never came. " + "Details. " * self.bench.padding)

    def step(self, action):
        self.bench.received.append(action)
        if action.startswith("{"):
            call = json.loads(action)
            return Observation(f"lookup_order -> order {call['arguments'].get('order_id')} shipped", score=0.5)
        done = "DONE" in action
        return Observation("Customer: thanks" if done else "Customer: and?", score=1.0 if done else 0.5, done=done)

    def close(self):
        self.bench.open -= 1


class Support(Benchmark):
    name = "support"
    categories = ["tickets"]
    max_steps = 6

    def __init__(self, preset="chat", padding=0, max_live=None, task_steps=None, tools=None):
        self.harness_hints = {"preset": preset, "system_prompt": "You are a support agent for a shop."}
        self.padding, self.max_live, self.task_steps, self.tools = padding, max_live, task_steps, tools
        self.received, self.open, self.most_open = [], 0, 0

    def tasks(self, split, per_category=None):
        n = per_category or 3
        return [Task(id=f"support/{split}/{i}", benchmark="support", split=split, category="tickets", seed=i,
                     prompt="Resolve the customer's ticket.", max_steps=self.task_steps, tools=self.tools)
                for i in range(n)]

    def env(self, task):
        return SupportEnv(task, self)


def program(tmp_path, bench):
    root = seed_files(skills=[], system_prompt=bench.harness_hints.get("system_prompt"), into=tmp_path / "p")
    return Program("p", "", str(root), content_hash(root), {})


def play(tmp_path, bench, answers, n=1):
    backend = ScriptedBackend(answers=answers)
    eps = run_episodes(program_context(program(tmp_path, bench)), bench, backend, bench.tasks("dev", n))
    return eps, backend


def test_chat_preset_keeps_turns_plays_whole_replies_and_uses_the_benchmarks_system_prompt(tmp_path):
    bench = Support()
    (ep,), backend = play(tmp_path, bench, ["Sorry to hear that.\nLet me check.", "It shipped. DONE"])
    assert bench.received == ["Sorry to hear that.\nLet me check.", "It shipped. DONE"]  # multi-line, whole
    assert ep.score == 1.0 and ep.won
    second = backend.calls[1]
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "user"]
    assert second.messages[0].content.startswith("You are a support agent for a shop.")
    assert "my order 7 never came" in second.messages[1].content and second.messages[3].content == "Customer: and?"
    # a scripted backend declares no context window: taken for an API model's 32k, a 64th of it for a reply
    assert second.max_tokens == 32768 // 64 and second.stop is None and second.tools is None


def test_over_budget_text_is_cut_visibly_in_tokens_not_silently(tmp_path):
    bench = Support(padding=400)
    bench.harness_hints["observation_tokens"] = 60
    (ep,), backend = play(tmp_path, bench, ["DONE"])
    opening = backend.calls[0].messages[1].content
    assert re.search(r"\[\.\.\. \d+ more tokens cut\]", opening) and "my order 7 never came" in opening
    assert len(opening) < 600 and "more tokens cut" in ep.steps[0].prompt  # and the trace keeps the marker
    small = Support(padding=3)
    (_,), backend = play(tmp_path / "small", small, ["DONE"])
    assert "cut]" not in backend.calls[0].messages[1].content  # within budget: shown whole


def test_tool_calling_preset_offers_the_tools_and_sends_calls_as_json(tmp_path):
    bench = Support(preset="tool-calling", tools=TOOLS)
    native = GenResult(text="", tool_calls=[{"name": "lookup_order", "arguments": {"order_id": 7}}])
    written = 'Let me look. {"name": "lookup_order", "arguments": {"order_id": 8}}'
    (ep,), backend = play(tmp_path, bench, [native, written, "Order 7 shipped yesterday. DONE"])
    assert [json.loads(a) for a in bench.received[:2]] == [{"name": "lookup_order", "arguments": {"order_id": 7}},
                                                           {"name": "lookup_order", "arguments": {"order_id": 8}}]
    assert bench.received[2] == "Order 7 shipped yesterday. DONE" and ep.score == 1.0
    first = backend.calls[0]
    assert first.tools == TOOLS and "lookup_order(order_id): Find an order by id." in first.messages[0].content
    assert "order 7 shipped" in backend.calls[1].messages[-1].content


SEND = {"type": "function", "function": {
    "name": "send_money", "description": "Send money.",
    "parameters": {"type": "object", "required": ["recipient", "amount"],
                   "properties": {"recipient": {"type": "string"}, "amount": {"type": "number", "minimum": 0}}}}}


def test_a_task_with_tools_is_tool_calling_by_default_and_its_first_reply_must_be_a_call(tmp_path):
    bench = Support(preset=None, tools=[SEND])
    bench.harness_hints = {}
    backend = ScriptedBackend(answers=['{"arguments": {"amount": 1, "recipient": "b"}, "name": "send_money"}',
                                       "All done. DONE"])
    (ep,) = run_episodes(program_context(program(tmp_path, bench)), bench, backend, bench.tasks("dev", 1))
    first, second = backend.calls
    assert first.tools == [SEND] and first.tool_choice == "required" and second.tool_choice is None
    assert "send_money(recipient, amount)" in first.messages[0].content
    # canonical: the name, then the arguments in the schema's order (as the grammar writes them)
    assert bench.received[0] == '{"name": "send_money", "arguments": {"recipient": "b", "amount": 1}}'
    assert ep.steps[0].action == bench.received[0] and ep.score == 1.0


def test_a_demonstrated_call_is_replayed_as_the_grammar_writes_it(tmp_path):
    """However the benchmark spells a gold call, imitation trains the one text a tool-call request is answered
    in (the name, then the arguments in the schema's order): the tokens the grammar lets the policy write."""
    from types import SimpleNamespace

    from evolver.demonstrations import replay
    from evolver.harness import make_harness

    bench = Support(preset=None, tools=[SEND])
    bench.harness_hints = {}
    prog = program(tmp_path, bench)
    task = bench.tasks("train", 1)[0]
    gold = ['{"arguments": {"amount": 2, "recipient": "b"}, "name": "send_money"}', "Paid. DONE"]
    ep = replay(SimpleNamespace(id="r", benchmark=bench), prog, make_harness(program_context(prog)), task, gold)
    canonical = '{"name": "send_money", "arguments": {"recipient": "b", "amount": 2}}'
    assert [s.output for s in ep.steps] == [canonical, "Paid. DONE"] and bench.received == [canonical, "Paid. DONE"]


def test_a_call_made_again_is_answered_by_asking_for_the_final_answer(tmp_path):
    bench = Support(preset=None, tools=[SEND])
    bench.harness_hints = {}
    call = '{"name": "send_money", "arguments": {"recipient": "b", "amount": 1}}'
    backend = ScriptedBackend(answers=[call, call, call, "All done. DONE"])
    (ep,) = run_episodes(program_context(program(tmp_path, bench)), bench, backend, bench.tasks("dev", 1))
    # asked for the answer, the model wrote the call again: sent as its text (this env runs it), then asked again
    assert [r.tool_choice for r in backend.calls] == ["required", None, "none", "none"]
    assert bench.received[2] == call and bench.received[3] == "All done. DONE" and ep.score == 1.0


def test_follow_notes_plays_a_noted_call_that_validates_and_is_grounded_else_names_its_tool(tmp_path):
    bench = Support(preset=None, tools=[SEND])
    bench.harness_hints = {}
    root = program(tmp_path, bench).root
    harness = (tmp_path / "p" / "harness" / "harness.py")
    harness.write_text(harness.read_text().replace("FOLLOW_NOTES = False", "FOLLOW_NOTES = True"))
    from evolver.harness import make_harness

    h = make_harness(program_context(Program("p", "", root, content_hash(root), {})))
    task = bench.tasks("dev", 1)[0]
    obs = Observation("Customer: pay bob 5")
    state = h.start(task, obs)
    state["transcript"] += "\nCustomer: pay bob 5"
    state["observe_due"] = False
    state["observed"]["miner"] = 'Next: {"name": "send_money", "arguments": {"recipient": "bob", "amount": 5}}.'
    req = h.next_call(state, obs)
    assert isinstance(req, ChoiceRequest) and req.options == [
        '{"name": "send_money", "arguments": {"recipient": "bob", "amount": 5}}']
    state["observed"]["miner"] = 'Next: {"name": "send_money", "arguments": {"recipient": "bob"}}.'  # no amount
    req = h.next_call(state, obs)
    assert isinstance(req, GenRequest) and req.tool_choice == "required"  # invalid: the note says nothing
    state["observed"]["miner"] = 'Next: {"name": "send_money", "arguments": {"recipient": "eve", "amount": 5}}.'
    req = h.next_call(state, obs)  # eve is no one this episode mentions: the note names the tool only
    assert isinstance(req, GenRequest) and req.tool_choice == "send_money" and req.tools == [SEND]
    state["observed"]["miner"] = "Next: Sent it, all done."
    assert h.next_call(state, obs).tool_choice == "none"  # the next move is the answer: the model writes it
    played = '{"name": "send_money", "arguments": {"recipient": "bob", "amount": 5}}'
    state["observed"]["miner"] = f"Next: {played}."
    state["history"].append((played, "sent"))
    assert isinstance(h.next_call(state, obs), GenRequest)  # a call already made is not played again by a note
    reply = GenResult(text='I sent {"name": "send_money", "arguments": {}} earlier.', tool_calls=[])
    action = h.parse(state, obs, GenRequest(messages=[], tools=[SEND]), reply)
    assert action.env_action == reply.text  # an engine's final message ([] calls) is not read as a call


def test_text_game_preset_is_the_default_and_writes_one_line_actions(tmp_path):
    bench = Support(preset=None)
    bench.harness_hints = {}
    (ep,), backend = play(tmp_path, bench, ["DONE and more\nsecond line"])
    assert bench.received == ["DONE and more"] and backend.calls[0].max_tokens == 24
    assert backend.calls[0].messages[1].content.startswith("Task: Resolve the customer's ticket.")


def test_a_tasks_step_limit_overrides_the_benchmarks_and_max_live_caps_open_envs(tmp_path):
    bench = Support(task_steps=2, max_live=2)
    eps, _ = play(tmp_path, bench, ["hello"] * 20, n=5)
    assert [len(e.steps) for e in eps] == [2] * 5  # the benchmark allows 6
    assert bench.most_open == 2 and bench.open == 0


def test_the_contract_names_every_info_key_and_task_field_the_core_reads():
    doc = base.__doc__
    core = Path(base.__file__).parents[1]
    keys = set()
    for path in [core / "lockstep.py", core / "seed" / "harness" / "harness.py"]:
        text = path.read_text()
        keys |= set(re.findall(r"info\.get\(\"(\w+)\"", text))
        keys |= set(re.findall(r"for k in \(([^)]*)\) if k in info", text) and
                    re.findall(r"\"(\w+)\"", re.search(r"for k in \(([^)]*)\) if k in info", text).group(1)))
    assert {"won", "rewards", "look", "inventory"} <= keys
    for key in keys:
        assert f"``{key}``" in doc, f"info key {key!r} is read by the core but not in the benchmark contract"
    for hint in ("preset", "system_prompt", "observation_tokens", "reply_tokens"):
        assert f"``{hint}``" in doc
    for field in ("Task.max_steps", "Task.tools", "Task.hints", "max_live", "Task.gold"):
        assert field in doc
