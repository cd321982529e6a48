"""The evaluator's error policy and tools: one episode's failure is a 0 with its trace."""
import shutil
import sys
from pathlib import Path

from evolver.backends.scripted import ScriptedBackend
from evolver.benchmarks.basic import BasicBenchmark
from evolver.config import Config
from evolver.evaluate import evaluate_many, run_episodes, sample_stratified, summarize
from evolver.harness import program_context
from evolver.seeding import seed_files
from evolver.programs import content_hash
from evolver.run import Run
from evolver.skills import write_skill
from evolver.types import GenResult, Program

sys.path.insert(0, str(Path(__file__).parent))
import toybench  # noqa: E402


def program(tmp_path, name="p", skills=()):
    root = tmp_path / name
    seed_files(into=root)
    for skill in skills:
        write_skill(root / "skills", **skill)
    return Program(name, "", str(root), content_hash(root), {})


def test_garbage_and_failed_calls_score_zero_and_keep_their_trace(tmp_path):
    bench = toybench.UpperBench()
    tasks = bench.tasks("dev")
    answers = ["\x00\x01 ### }}}", GenResult(text="", error="context overflow"), "RIVER", "the answer is STONE"]
    eps = run_episodes(program_context(program(tmp_path)), bench, ScriptedBackend(answers=answers), tasks)
    assert [e.score for e in eps] == [0.0, 0.0, 0.0, 0.0]  # none is the uppercase dev word
    assert eps[0].steps[0].output.startswith("\x00") and eps[0].steps[0].observation == "wrong"
    assert eps[1].steps[0].error == "context overflow"
    assert all(e.error is None for e in eps)  # bad output is the model's failure, not a crash


def test_a_crashing_harness_fails_its_episodes_not_the_evaluation(tmp_path):
    bench = toybench.UpperBench()
    good = program(tmp_path, "good")
    bad = program(tmp_path, "bad")
    hfile = Path(bad.root) / "harness" / "harness.py"
    hfile.write_text(hfile.read_text().replace("    def parse(self, state, obs, request, result):",
                                               "    def parse(self, state, obs, request, result):\n        1 / 0"))
    bad.hash = content_hash(Path(bad.root))
    backend = ScriptedBackend(rule=toybench.make_rule())
    good_eps, bad_eps = evaluate_many([(program_context(good), bench.tasks("dev")),
                                       (program_context(bad), bench.tasks("dev"))], bench, backend)
    assert all(e.error is None for e in good_eps)
    assert all(e.steps[0].error and "ZeroDivisionError" in e.steps[0].error for e in bad_eps)
    assert summarize("bad", "dev", bad_eps).score == 0.0


def test_tools_read_skill_and_a_hanging_script_is_killed(tmp_path):
    hang = {"name": "slowpoke", "description": "Use when you want to wait forever.", "body": "1. run it",
            "scripts": {"wait.py": "import time\nwhile True:\n    time.sleep(1)\n"}}
    shout = {"name": "shout-words", "description": "Use when asked to answer with a word.",
             "body": "Answer in UPPERCASE."}
    p = program(tmp_path, skills=[hang, shout])
    hfile = Path(p.root) / "harness" / "harness.py"  # no injected bodies: the model must call the tool
    hfile.write_text(hfile.read_text().replace("INJECT_SKILLS = 2", "INJECT_SKILLS = 0"))
    p.hash = content_hash(Path(p.root))
    bench = toybench.UpperBench()
    task = bench.tasks("dev")[0]
    backend = ScriptedBackend(answers=["read_skill shout-words", "run_skill slowpoke wait.py", "MAPLE"])
    import evolver.lockstep as ev

    real = ev.run_tool

    def quick_tool(ctx, action):  # the sandbox's timeout is 10 s in production; keep the test short
        from evolver import sandbox
        orig = sandbox.run_script
        sandbox.run_script = lambda *a, **k: orig(*a, **{**k, "timeout_s": 1})
        try:
            return real(ctx, action)
        finally:
            sandbox.run_script = orig
    ev.run_tool = quick_tool
    try:
        (ep,) = run_episodes(program_context(p), bench, backend, [task])
    finally:
        ev.run_tool = real
    tools = [s.tool_calls[0] for s in ep.steps if s.tool_calls]
    assert tools[0]["tool"] == "read_skill" and "UPPERCASE" in tools[0]["result"]
    assert tools[1]["tool"] == "run_skill" and tools[1]["result"].startswith("[timed out]")
    assert ep.score == 1.0 and ep.steps[-1].action == "MAPLE"
    # The skill body reached the model's next context.
    assert "UPPERCASE" in backend.calls[1].messages[-1].content


def test_stratified_batches_and_java_fallback(monkeypatch, tmp_path):
    tasks = BasicBenchmark().tasks("train", per_category=5)
    batch = sample_stratified(tasks, 2, seed=3)
    assert sorted({t.category for t in batch}) == ["arithmetic", "kb-hops", "units"] and len(batch) == 6
    assert batch == sample_stratified(tasks, 2, seed=3) and batch != sample_stratified(tasks, 2, seed=4)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    run = Run(Config(store=str(tmp_path)), store=None, repo=None)
    assert run.benchmark.name == "basic"


class StepsBench(toybench.UpperBench):
    """Episode ``seed`` ends after ``seed`` actions: episodes of known, different lengths."""
    max_steps = 50

    def tasks(self, split, per_category=None):
        from evolver.types import Task
        return [Task(id=f"steps/{i}", benchmark="steps", split=split, category="c", seed=n, prompt=f"take {n} steps")
                for i, n in enumerate([1, 5, 1, 1, 1])]

    def env(self, task):
        from evolver.benchmarks.base import Env
        from evolver.types import Observation

        class StepsEnv(Env):
            taken = 0

            def reset(self):
                return Observation(task.prompt)

            def step(self, action):
                self.taken += 1
                done = self.taken >= task.seed
                return Observation(f"step {self.taken}", score=1.0 if done else 0.0, done=done)
        return StepsEnv()


def test_a_finished_episode_frees_its_slot_for_the_next_at_once(tmp_path):
    bench = StepsBench()
    sizes: list[int] = []

    class Counting(ScriptedBackend):
        def generate(self, requests):
            sizes.append(len(requests))
            return super().generate(requests)
    order: list[str] = []
    eps = run_episodes(program_context(program(tmp_path)), bench, Counting(rule=lambda r: "go"), bench.tasks("dev"),
                       max_live=2, on_episode=lambda e: order.append(e.task.id))
    # The 5-step episode shares every batch with the 1-step ones that follow it; waves of two would
    # have made 7 calls, the last ones with a single row.
    assert sizes == [2, 2, 2, 2, 1]
    assert [len(e.steps) for e in eps] == [1, 5, 1, 1, 1] and all(e.score == 1.0 for e in eps)
    assert order == ["steps/0", "steps/2", "steps/3", "steps/4", "steps/1"]  # each reported when it ends


def test_the_cache_key_holds_the_step_limit_an_episode_was_played_under(tmp_path):
    from evolver.store import Store

    store = Store(tmp_path / "s.duckdb")
    prog = program_context(program(tmp_path))
    short, long = StepsBench(), StepsBench()
    short.max_steps, long.max_steps = 3, 5
    task = short.tasks("dev")[1:2]  # ends after 5 actions
    backend = ScriptedBackend(answers=["wait"] * 200)
    first = run_episodes(prog, short, backend, task, store=store)
    again = run_episodes(prog, short, backend, task, store=store)
    other = run_episodes(prog, long, backend, task, store=store)
    assert len(first[0].steps) == 3 and again[0].cached and again[0].id == first[0].id  # same limit: cached
    assert not other[0].cached and len(other[0].steps) == 5 and other[0].score == 1.0  # another: played
    store.close()


def test_a_choice_of_one_is_answered_without_the_model(tmp_path):
    """A harness that has settled the move (one option) costs no model call; the step keeps its prompt."""
    class OneWay(StepsBench):
        def env(self, task):
            from evolver.types import Observation
            inner = super().env(task)

            class OneWayEnv(type(inner)):
                def reset(self):
                    return Observation(task.prompt, actions=["go on"])

                def step(self, action):
                    obs = super().step(action)
                    return Observation(obs.text, score=obs.score, done=obs.done, actions=["go on"])
            return OneWayEnv()
    asked: list = []

    class Counting(ScriptedBackend):
        def generate(self, requests):
            asked.extend(requests)
            return super().generate(requests)

        def choose(self, requests):
            asked.extend(requests)
            return super().choose(requests)
    eps = run_episodes(program_context(program(tmp_path)), OneWay(), Counting(rule=lambda r: "go on"),
                       OneWay().tasks("dev")[:2], max_live=2)
    assert asked == []
    assert [len(e.steps) for e in eps] == [1, 5] and all(e.score == 1.0 for e in eps)
    step = eps[1].steps[2]
    assert step.action == "go on" and "take 5 steps" in step.prompt and step.prompt_tokens == 0
