"""Meta-Harness's parts: answer parsing and its checks, the budgeted rendering, agentic mode, the repair call."""
import sys
from pathlib import Path

from evolver.frontier import Frontier
from evolver.types import Episode, Step, Task

PLUGIN = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PLUGIN))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from evolver_metaharness.answer import code_problem, only_constants_changed, parse_answer  # noqa: E402
from evolver_metaharness.render import render  # noqa: E402
from evolver_metaharness.workspace import Export, TraceRef  # noqa: E402
from test_metaharness_loop import SEED, UPPERCASE, answer, only_this_plugin, proposer_rule, run_toy  # noqa: E402,F401


def test_answer_fields_code_and_checks():
    a = parse_answer("PARENT: p0003.\nHYPOTHESIS: loops\nMECHANISM: memory: keep a visited set\n"
                     "Some words.\n```python\nprint('draft')\n```\nFinal:\n```python\n" + UPPERCASE + "```", SEED)
    assert (a.parent, a.hypothesis, a.mechanism, a.problem) == ("p0003", "loops", "memory: keep a visited set", "")
    assert a.code == UPPERCASE  # the block that defines class Harness, not the draft before it
    assert parse_answer("HYPOTHESIS: x\nno code here", SEED).problem.startswith("the answer has no ```python block")
    bad = parse_answer(answer(SEED.replace("def parse(self", "def parse(self,,")), SEED)
    assert bad.problem.startswith("the code does not parse") and bad.repairable
    assert code_problem("class Harness:\n    def start(self, t, o):\n        pass\n") == \
        "class Harness lacks the interface methods next_call, parse, observe"
    assert code_problem("class Harness(Base):\n    pass\n") == ""  # a subclass may inherit them
    assert code_problem("x = 1\n") == "the code defines no top-level class Harness"
    assert only_constants_changed(SEED, SEED.replace("INJECT_SKILLS = 2", "INJECT_SKILLS = 3"))
    assert only_constants_changed(SEED, SEED.replace('"""The default harness', '"""A harness'))
    assert not only_constants_changed(SEED, UPPERCASE) and not only_constants_changed(SEED, SEED)
    assert parse_answer(answer(SEED.replace("INJECT_SKILLS = 2", "INJECT_SKILLS = 3")), SEED,
                        allow_constant_changes=True).problem == ""


def _export(n_traces: int) -> Export:
    refs = []
    for i in range(n_traces):
        task = Task(id=f"b/dev/{i}", benchmark="b", split="dev", category=f"c{i % 2}", prompt="p", gold="G")
        steps = [Step(0, '[{"role": "user", "content": "' + "context " * 50 + '"}]', "o", "act", "obs " * 40)]
        ep = Episode(task=task, program_id="seed", program_hash="h", model="m", seed=0, steps=steps,
                     score=i / n_traces, id=f"e{i:07d}", purpose="eval")
        refs.append(TraceRef(f"candidates/seed/traces/eval-b-dev-{i}-e{i:07d}.txt", "seed", ep))
    return Export(Path("/nowhere"), ["seed"], refs, [], {"seed": 0.2})


def test_rendering_fits_the_budget_and_lists_every_trace_it_left_out():
    frontier = Frontier.from_config(["score:max"])
    frontier.consider("seed", {"score": 0.2, "success": 0, "context_tokens": 10, "cost": 10})
    ws = _export(30)
    count = lambda text: len(text.split())  # noqa: E731
    budget = 1000 + count(SEED)  # the interface and the harness count against it: room for a few traces
    small = render(ws, "seed", SEED, frontier, 0.8, budget, count, "FORMAT")
    assert small.shown and small.left_out and len(small.shown) + len(small.left_out) == 30
    assert count(small.text) <= budget + 800
    assert small.shown[0].endswith("-e0000000.txt")  # the worst failure first
    assert "## Left out to fit the budget" in small.text
    listed = small.text.split("## Left out to fit the budget")[1]
    assert f"{len(small.left_out)} traces in candidates/seed/traces/" in listed
    assert "candidates/seed/traces/index.tsv" in listed
    big = render(ws, "seed", SEED, frontier, 0.8, 10**6, count, "FORMAT")
    # only failures of the best and two of its successes are ranked; the rest is still listed, never dropped
    assert len(big.shown) == 4 + 2 and len(big.left_out) == 24 and "## Left out" in big.text


def test_agentic_mode_reads_the_workspace_with_tools_before_answering(tmp_path):
    results = []
    base = proposer_rule([answer(UPPERCASE)])

    def rule(req):
        text = "\n".join(m.content for m in req.messages)
        if "You work in a folder holding the whole search" in text:
            turn = sum(1 for m in req.messages if m.role == "assistant")
            if turn:
                results.append(req.messages[-1].content)
            return ["LIST", "READ summary.md", "GREP score candidates/seed/traces",
                    "SQL SELECT task_id, score FROM episodes WHERE purpose = 'train' ORDER BY task_id",
                    answer(UPPERCASE)][turn]
        return base(req)
    run, store, repo, summary = run_toy(tmp_path, rule, plugin_options={"meta-harness": {"mode": "agentic"}})
    try:
        (prop,) = store.proposals(run.id)
        assert prop["status"] == "admitted"
        assert prop["detail"]["tool_calls"][:2] == ["LIST", "READ summary.md"]
        listing, summary_md, grep, sql = results
        assert "README.md" in listing and "candidates/seed/harness/harness.py" in listing
        assert "candidates/seed/traces/index.tsv" in listing
        assert summary_md.startswith("Result:\n# Evolution summary")
        assert "candidates/seed/traces/" in grep and ":" in grep
        assert "upper/train/0\t0.0" in sql
    finally:
        store.close()


def test_code_that_does_not_parse_gets_one_repair_call(tmp_path):
    broken = answer(UPPERCASE.replace("def parse(self", "def parse(self,,"))
    calls = []
    base = proposer_rule([answer(UPPERCASE)])

    def rule(req):
        text = "\n".join(m.content for m in req.messages)
        if "HYPOTHESIS: <what goes wrong now" in text:
            calls.append(req.messages[-1].content)
            return broken if len(calls) == 1 else answer(UPPERCASE)
        return base(req)
    run, store, repo, summary = run_toy(tmp_path, rule)
    try:
        (prop,) = store.proposals(run.id)
        assert len(calls) == 2 and calls[1].startswith("Your answer cannot be used: the code does not parse")
        assert prop["status"] == "admitted" and prop["detail"]["repaired"] is True
    finally:
        store.close()


def test_the_proposer_token_budget_ends_an_agentic_exchange(tmp_path):
    turns = []
    base = proposer_rule([answer(UPPERCASE)])

    def rule(req):
        text = "\n".join(m.content for m in req.messages)
        if "You work in a folder holding the whole search" in text:
            turns.append(len(req.messages))
            return "READ summary.md"  # would read forever: only the budget stops it
        return base(req)
    run, store, repo, summary = run_toy(tmp_path, rule, plugin_options={"meta-harness": {"mode": "agentic"}},
                                        max_proposer_tokens=50)
    try:
        (prop,) = store.proposals(run.id)
        assert len(turns) == 1 and run.tokens["proposer"] >= 50  # one call, then the budget was spent
        assert prop["status"] == "rejected" and "no ```python block" in prop["reason"]
        assert prop["detail"]["tool_calls"] == []
    finally:
        store.close()


def test_the_tools_read_only_inside_their_folder(tmp_path):
    from evolver.proposer_tools import Tools

    (tmp_path / "ws" / "a").mkdir(parents=True)
    (tmp_path / "ws" / "a" / "x.txt").write_text("alpha\nbeta\n")
    (tmp_path / "secret.txt").write_text("gold")
    tools = Tools(tmp_path / "ws")
    assert tools.run("LIST") == "a/x.txt" and tools.run("READ a/x.txt") == "alpha\nbeta\n"
    assert tools.run("READ ../secret.txt").startswith("no such file") and "gold" not in tools.run("GREP gold ..")
    assert tools.run("GREP ^b") == "a/x.txt:2: beta" and tools.run("GREP ( a").startswith("bad regex")
    assert tools.run("SQL SELECT 1").startswith("unknown tool")  # no store given: no SQL tool
