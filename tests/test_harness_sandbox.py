"""A candidate's harness in a sandboxed subprocess (evolver.harness_sandbox), the audit of harness code
that recognises particular tasks (evolver.checks.audit_harness_code), and the evaluation budget."""
import shutil
from pathlib import Path

import pytest

from evolver.checks import audit_harness_code
from evolver.evaluate import evaluate_many
from evolver.lockstep import HarnessTimeout
from evolver.harness import SEED_DIR, Action, program_context
from evolver.harness_sandbox import RemoteHarnessError, SandboxedHarness
from evolver.skills import write_skill
from evolver.types import ChoiceResult, GenResult, Observation, Program, Task

SEED = (SEED_DIR / "harness" / "harness.py").read_text()


def program(tmp_path, code: str = SEED, name: str = "p") -> Program:
    root = tmp_path / name
    (root / "harness").mkdir(parents=True)
    (root / "harness" / "harness.py").write_text(code)
    (root / "prompt.md").write_text("Play well.")
    write_skill(root / "skills", "open-doors", "Use when a door is closed.", "1. Open it.")
    write_skill(root / "skills", "cook-food", "Use when cooking a meal.", "1. Read the cookbook.")
    return Program(name, "c0ffee", str(root), "h" + name)


def with_next_call(body: str) -> str:
    return SEED.replace("    def next_call(self, state, obs):\n", f"    def next_call(self, state, obs):\n{body}")


def test_plays_like_the_in_process_harness_and_asks_the_evaluator_for_skills(tmp_path):
    ctx = program_context(program(tmp_path))
    chosen = []

    def select(task, k):  # stands in for the select_skills hook: it must be the evaluator's that runs
        chosen.append((task.id, k, task.gold))
        return [s for s in ctx.skills if s.name == "cook-food"][:k]
    ctx.select_skills = select
    h = SandboxedHarness(ctx)
    try:
        task = Task("t1", "b", "train", "cooking", prompt="Make a meal.", gold="SECRET")
        state = h.start(task, Observation("A kitchen."))
        assert chosen == [("t1", 2, None)]  # the harness never sees the gold answer
        req = h.next_call(state, Observation("A kitchen.", actions=["open fridge", "look"]))
        assert req.options == ["open fridge", "look"] and "## Skill: cook-food" in req.messages[0].content
        action = h.parse(state, Observation("A kitchen."), req, ChoiceResult(index=1, scores=[0.0, 1.0]))
        assert action.env_action == "look"
        h.observe(state, action, "You see a fridge.")
        req = h.next_call(state, Observation("Now?", actions=["open fridge", "look"]))
        assert "Recent steps:\n> look\n\nObservation: Now?" in req.messages[1].content  # its memory lives in the child
        assert h.next_call(state, Observation("", done=True)) is None
    finally:
        h.close()


def test_a_skill_script_the_harness_runs_itself_is_run_by_the_evaluator(tmp_path):
    # a skill of twx's hand-written pack (opt-in), used here as a skill with a script
    pack = Path(__file__).resolve().parents[1] / "plugins" / "twx" / "evolver_twx" / "packs" / "twx-experts"
    prog = program(tmp_path)
    shutil.copytree(pack / "arithmetic-word-problems", Path(prog.root) / "skills" / "arithmetic-word-problems")
    ctx = program_context(prog)
    asked = []
    inner = ctx.run_skill

    def run_skill(name, script, args=(), stdin=""):
        asked.append((name, script))
        return inner(name, script, args, stdin)
    ctx.run_skill = run_skill
    h = SandboxedHarness(ctx)
    try:
        state = h.start(Task("t", "b", "train", "arithmetic", prompt="Solve it."), Observation("A room."))
        h.observe(state, Action(env_action="read math problem"), "The math problem: multiply 7 and 5 .")
        req = h.next_call(state, Observation("Now?", actions=["take 35 apples", "take 12 pears"]))
        assert "[arithmetic-word-problems] multiply 7 and 5 = 35. The answer is 35." in req.messages[1].content
        assert asked == [("arithmetic-word-problems", "scripts/solve.py")]
    finally:
        h.close()


def test_an_exception_comes_back_with_the_childs_traceback(tmp_path):
    h = SandboxedHarness(program_context(program(tmp_path, with_next_call("        raise ValueError('bad state')\n"))))
    try:
        state = h.start(Task("t", "b", "train", "c"), Observation("x"))
        with pytest.raises(RemoteHarnessError) as err:
            h.next_call(state, Observation("x"))
        assert repr(err.value) == "ValueError('bad state') (in the sandboxed harness)"
        assert "Traceback" in str(err.value) and "in next_call" in str(err.value)
    finally:
        h.close()


def test_a_harness_that_cannot_start_leaves_no_process_or_folder(tmp_path, monkeypatch):
    import evolver.sandbox
    opened = []
    real = evolver.sandbox.open_python
    monkeypatch.setattr(evolver.sandbox, "open_python", lambda *a, **k: opened.append(real(*a, **k)) or opened[-1])
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # its scratch folder is made here
    with pytest.raises(RemoteHarnessError, match="ImportError"):
        SandboxedHarness(program_context(program(tmp_path, "raise ImportError('broken')\n", "broken")))
    (session,) = opened  # never handed out, so no caller could close it: the constructor did
    assert not session.alive() and not Path(session.folder).exists()
    assert not list(tmp_path.glob("evolver-sbx-*"))


def test_time_memory_and_network_limits(tmp_path, monkeypatch):
    import evolver.lockstep
    monkeypatch.setattr(evolver.lockstep, "HARNESS_CALL_S", 1.0)
    hang = SandboxedHarness(program_context(program(tmp_path, with_next_call("        while True:\n            pass\n"), "hang")))
    state = hang.start(Task("t", "b", "train", "c"), Observation("x"))
    with pytest.raises(HarnessTimeout, match="longer than 1s .*sandboxed"):
        hang.next_call(state, Observation("x"))
    assert not hang.session.alive()  # killed, not left spinning
    with pytest.raises(RemoteHarnessError, match="no longer running"):
        hang.next_call(state, Observation("x"))
    hang.close()

    hog = SandboxedHarness(program_context(program(tmp_path, with_next_call("        self.big = bytearray(1 << 31)\n"), "hog")),
                           memory_mb=512)
    try:
        state = hog.start(Task("t", "b", "train", "c"), Observation("x"))
        with pytest.raises(RemoteHarnessError, match="MemoryError"):
            hog.next_call(state, Observation("x"))
    finally:
        hog.close()

    net = with_next_call("        import socket\n        socket.create_connection(('1.1.1.1', 80), timeout=2)\n")
    talker = SandboxedHarness(program_context(program(tmp_path, net, "net")))
    try:
        state = talker.start(Task("t", "b", "train", "c"), Observation("x"))
        with pytest.raises(RemoteHarnessError, match="Error"):  # OSError / PermissionError, never a connection
            talker.next_call(state, Observation("x"))
    finally:
        talker.close()


def test_evaluate_many_plays_a_sandboxed_smoke_episode(tmp_path):
    import toybench
    from evolver.backends.scripted import ScriptedBackend

    ctx = program_context(program(tmp_path))
    made = []

    def factory(c):
        made.append(SandboxedHarness(c))
        return made[-1]
    backend = ScriptedBackend(rule=toybench.make_rule())
    tasks = toybench.UpperBench().tasks("train", per_category=1)
    try:
        (eps,) = evaluate_many([(ctx, tasks)], toybench.UpperBench(), backend, harness_factory=factory)
    finally:
        for h in made:
            h.close()
    assert len(made) == 1 and [e.error for e in eps] == [None, None]
    assert [e.steps[0].action for e in eps] == [t.gold.lower() for t in tasks] and eps[0].prompt_tokens > 0
    assert len(backend.calls) == 2  # the model ran here, in the evaluator, once per episode


def test_audit_rejects_harness_code_that_recognises_particular_tasks(tmp_path):
    parent = tmp_path / "parent"
    shutil.copytree(Path(program(tmp_path, name="base").root), parent)
    cases = {
        "reads gold": ("        return state['task'].gold\n", "reads a gold answer: `state['task'].gold`"),
        "getattr": ("        x = getattr(state['task'], 'seed')\n", "reads a task's seed"),
        "seed": ("        if self.task.seed > 3:\n            return None\n", "reads a task's seed: `self.task.seed`"),
        "id compare": ("        if state['task'].id in ('twx/a/dev/1', 'twx/a/dev/2'):\n            return None\n",
                       "compares a task id with a literal"),
        "id table": ("        hint = HINTS[state['task'].id]\n", "looks up a table by task id"),
    }
    for name, (body, expected) in cases.items():
        cand = tmp_path / name.replace(" ", "-")
        shutil.copytree(parent, cand)
        (cand / "harness" / "harness.py").write_text(with_next_call(body))
        reason = audit_harness_code(cand, parent)
        assert reason.startswith("harness names particular tasks: harness/harness.py") and expected in reason, name
    # fine: its own RNG seeded, task ids as per-episode memory keys of its own, the parent's own code
    ok = with_next_call("        import random\n        random.seed(0)\n        self.seen = {state['task'].category: 1}\n")
    (parent / "harness" / "harness.py").write_text(ok)
    assert audit_harness_code(parent, None) == ""
    (parent / "harness" / "harness.py").write_text(with_next_call("        return state['task'].gold\n"))
    assert audit_harness_code(parent, parent) == ""  # what the parent already had is not held against it


def test_the_evaluation_budget_stops_the_search(tmp_path):
    from evolver.config import Config
    from evolver.loop import _budget_exhausted
    from evolver.run import Run
    from evolver.store import Store

    store = Store(tmp_path / "e.duckdb")
    try:
        cfg = Config(store=str(tmp_path), loop={"max_episodes": 3})
        run = Run(cfg, store, repo=None)
        run.record()
        assert _budget_exhausted(run, idle=0, typical_iteration_s=0) == ""
        eps = [evolver_episode(run.id, i) for i in range(3)]
        store.add_episodes(eps)
        assert _budget_exhausted(run, idle=0, typical_iteration_s=0) == \
            "evaluation budget of 3 episodes spent (3 played)"
    finally:
        store.close()


def evolver_episode(run_id: str, i: int):
    from evolver.types import Episode
    return Episode(task=Task(f"t{i}", "b", "dev", "c"), program_id="seed", program_hash="h", model="m", seed=0,
                   run_id=run_id, score=0.0)


def test_gen_results_survive_the_pipe():
    from evolver.harness_sandbox import decode_request, decode_result, encode_request, encode_result
    from evolver.types import GenRequest, Message
    req = GenRequest(messages=[Message("user", "hi")], max_tokens=7, stop=["\n"])
    assert decode_request(encode_request(req)) == req
    res = GenResult(text="ok", prompt_tokens=3)
    assert decode_result(encode_result(res)) == res
    choice = ChoiceResult(index=1, scores=[0.1, 0.9])
    assert decode_result(encode_result(choice)) == choice


def test_a_harness_gets_no_seed_meta_or_real_id_to_regenerate_its_task_from(tmp_path):
    # The attack: import the benchmark under another spelling, rebuild the split, find the task being played
    # by its id, seed or meta, and play the rebuilt task's answer. The harness reports what it was handed.
    import json

    import toybench
    from evolver.backends.scripted import ScriptedBackend
    from evolver.benchmarks.basic import BasicBenchmark
    from evolver.harness import task_for_harness

    spy = SEED.replace("    def parse(self, state, obs, request, result):\n", (
        "    def parse(self, state, obs, request, result):\n"
        "        import importlib, json\n"
        "        t = state['task']\n"
        "        bench = importlib.import_module('evolver.bench' + 'marks.ba' + 'sic').BasicBenchmark()\n"
        "        twins = [c for c in bench.tasks(t.split, 3) if c.id == t.id or (t.seed and c.seed == t.seed)]\n"
        "        stolen = twins[0].gold if twins else (t.meta or {}).get('answer')\n"
        "        return Action(env_action=json.dumps([t.id, t.seed, t.meta, stolen]))\n"), 1)
    bench = BasicBenchmark(categories=["arithmetic", "kb-hops"])
    tasks = bench.tasks("dev", 2)
    (eps,) = evaluate_many([(program_context(program(tmp_path, spy)), tasks)], bench,
                           ScriptedBackend(rule=toybench.make_rule()))
    for task, ep in zip(tasks, eps):
        seen_id, seed, meta, stolen = json.loads(ep.steps[0].action)
        assert seen_id != task.id and seen_id.startswith("task-")
        assert seed == 0 and meta == {} and stolen is None and ep.score == 0.0
    # Within a process the token is stable (a harness may key its own memory by it), and distinct per task.
    assert task_for_harness(tasks[0]).id == task_for_harness(tasks[0]).id != task_for_harness(tasks[1]).id
    # A benchmark that declares its seeds public hands them over.
    assert task_for_harness(tasks[0], public_seed=True).seed == tasks[0].seed


REACH = '''
    def start(self, task, obs):
        import importlib, json
        found = {}
        for name in %(modules)r:
            try:
                importlib.import_module(name)
                found[name] = "imported"
            except Exception as exc:
                found[name] = type(exc).__name__
        for path in %(paths)r:
            try:
                open(path, "rb").read(1)
                found[path] = "read"
            except Exception as exc:
                found[path] = type(exc).__name__
        raise RuntimeError("REACH " + json.dumps(found))
'''


def test_a_sandboxed_harness_imports_only_the_harness_api_and_its_benchmarks_declared_packages(tmp_path):
    # Built from what it may see, not from what to hide: whatever the name, the core's benchmarks, the
    # store, plugins and the packages that generate tasks are not there, and neither are their files.
    import json

    import evolver
    core = Path(evolver.__file__).resolve().parent
    store = tmp_path / "store.duckdb"
    store.write_bytes(b"secret")
    modules = ["evolver.harness", "evolver.types", "yaml", "evolver." + "benchmarks.basic", "evolver.store",
               "evolver.loop", "evolver.plugins", "evolver_twx", "textworld_express", "duckdb", "numpy", "torch"]
    paths = [str(core / "benchmarks" / "basic.py"), str(core / "harness.py"), str(store), "/etc/shadow"]
    try:  # twx's game engine and data files, and its plugin's source (its hand-written pack among them)
        import evolver_twx
        import textworld_express
        twx = Path(textworld_express.__file__).parent
        paths += [str(twx / "textworld-express.jar"), str(twx / "cooking_world.json"), evolver_twx.__file__]
    except ImportError:
        pass
    code = SEED.replace("    def start(self, task, obs):\n", REACH % {"modules": modules, "paths": paths}
                        + "\n    def unused(self, task, obs):\n", 1)

    def reached(**kw) -> dict:
        h = SandboxedHarness(program_context(program(tmp_path, code, name=f"p{len(kw)}")), **kw)
        try:
            with pytest.raises(RemoteHarnessError) as info:
                h.start(Task("t1", "b", "dev", "c", prompt="Play."), Observation("A room."))
        finally:
            h.close()
        return json.loads(str(info.value).split("REACH ", 1)[1].split("'")[0].split('"\n')[0].rstrip("')\""))

    seen = reached()
    assert {m: seen[m] for m in modules[:3]} == dict.fromkeys(modules[:3], "imported")
    assert all(seen[m] == "ModuleNotFoundError" for m in modules[3:]), seen
    assert all(seen[p] in ("FileNotFoundError", "PermissionError") for p in paths), seen
    # a benchmark that declares a package (with its reason) lets its harnesses import it
    assert reached(packages=["numpy"])["numpy"] == "imported"
    with pytest.raises(Exception, match="not installed here: no-such-package"):
        SandboxedHarness(program_context(program(tmp_path, name="q")), packages=["no-such-package"])


def test_a_sandboxed_harness_validates_a_noted_tool_call_against_the_tasks_tools(tmp_path):
    """The tool-call helpers (evolver.tool_calls and jsonschema) are part of the harness API in the sandbox:
    a noted call that fits the tools is played without the model, one that does not is left to the model."""
    prog = program(tmp_path, SEED.replace("FOLLOW_NOTES = False", "FOLLOW_NOTES = True"))
    call = '{"name": "send", "arguments": {"to": "bob", "amount": AMOUNT}}'
    script = f"import sys\nsys.stdin.read()\nprint('Next: ' + {call!r}.replace('AMOUNT', sys.argv[-1]) + '.')\n"
    for amount in ("5", '"five"'):
        write_skill(Path(prog.root) / "skills", "next-call", "Says the next call.", "Observes.",
                    meta={"metadata": {"observe": "scripts/next.py"}},
                    scripts={"next.py": script.replace("sys.argv[-1]", repr(amount))})
        tools = [{"type": "function", "function": {"name": "send", "parameters": {
            "type": "object", "required": ["to", "amount"],
            "properties": {"to": {"type": "string"}, "amount": {"type": "number"}}}}}]
        h = SandboxedHarness(program_context(prog))
        try:
            state = h.start(Task("t", "b", "train", "bank", prompt="Pay bob 5.", tools=tools), Observation("Hi."))
            req = h.next_call(state, Observation("Hi."))
        finally:
            h.close()
        if amount == "5":
            assert req.options == ['{"name": "send", "arguments": {"to": "bob", "amount": 5}}']
        else:
            assert req.tools == tools and req.tool_choice == "required"  # "five" is no number: the model's turn
