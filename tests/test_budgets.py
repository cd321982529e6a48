"""Text budgets that follow the model: a long task reaches a model that can read it whole, and a cut
for a small one is visible in the trace and named in the report (written as an outside author would,
against the public API)."""
from pathlib import Path

from evolver import Benchmark, Env, Observation, Task, program_context, run_episodes
from evolver.backends.scripted import ScriptedBackend
from evolver.config import Config, RoleConfig
from evolver.loop import seed_files
from evolver.programs import content_hash
from evolver.types import Program

FILLER = "The tool accepts a path and a mode; modes are read, write and append; errors are reported as codes. "


class LongDocs(Benchmark):
    """One step: reply with the code word that closes a 3,000-character page of tool documentation."""
    name = "longdocs"
    categories = ["docs"]
    max_steps = 1

    def tasks(self, split, per_category=None):
        words = {"train": ["alpha", "bravo"], "dev": ["charlie", "delta"], "test": ["echo", "foxtrot"]}[split]
        out = []
        for i, w in enumerate(words[:per_category or 2]):
            page = (FILLER * 40)[:2950]
            out.append(Task(id=f"longdocs/{split}/{i}", benchmark="longdocs", split=split, category="docs",
                            prompt=f"{page}\nReply with the code word: {w}", gold=w))
        return out

    def env(self, task):
        class Page(Env):
            def reset(self):
                return Observation("Your reply?")

            def step(self, action):
                ok = action.strip() == task.gold
                return Observation("right" if ok else "wrong", score=float(ok), done=True, info={"won": ok})
        return Page()


def read_code_word(req):
    """A model's reply: the code word, when its prompt holds it."""
    text = "\n".join(m.content for m in req.messages)
    return text.split("Reply with the code word: ", 1)[1].split()[0] if "Reply with the code word: " in text else "?"


def reader(window=None):
    return ScriptedBackend(rule=read_code_word, context_window=window)


def seed(tmp_path):
    root = tmp_path / "seed"
    if not root.exists():
        import shutil
        shutil.copytree(seed_files(), root)
    return Program("seed", "", str(root), content_hash(root), {})


def test_a_long_task_reaches_a_model_with_a_large_window_and_is_cut_visibly_for_a_small_one(tmp_path):
    bench, tasks = LongDocs(), LongDocs().tasks("test")
    for window, score in ((None, 1.0), (131072, 1.0), (8192, 0.0)):
        ctx = program_context(seed(tmp_path))
        backend = reader(window)
        ctx.context_window = window or 32768  # what Run.context sets from the executor (tested below)
        eps = run_episodes(ctx, bench, backend, tasks)
        assert [e.score for e in eps] == [score, score], (window, [e.steps[0].output for e in eps])
        if score == 0.0:  # the small model's prompt says the task goes on: nothing is dropped silently
            assert all("more tokens cut]" in e.steps[0].prompt for e in eps)
        else:
            assert not any("more tokens cut]" in e.steps[0].prompt for e in eps)


def test_the_context_window_comes_from_the_executor_and_a_cut_task_is_named_in_the_report(tmp_path):
    from evolver.report import cut_lines
    from evolver.run import Run
    from evolver.store import Store

    roles = {r: RoleConfig(backend="scripted", options={"rule": read_code_word, "context_window": 8192})
             for r in ("executor", "proposer", "builder", "judge")}
    store = Store(tmp_path / "store" / "evolver.duckdb")
    run = Run(Config(store=str(tmp_path / "store"), roles=roles), store, None)
    try:
        ctx = run.context(seed(tmp_path))
        small = run.models.backend("executor")
        assert ctx.context_window == 8192
        eps = run_episodes(ctx, LongDocs(), small, LongDocs().tasks("test"), store=store, run=run,
                           harness_factory=lambda c: __import__("evolver").make_harness(c))
        assert all(e.score == 0.0 for e in eps)
        lines = "\n".join(cut_lines(run))
        assert "## Cut to fit the context" in lines
        assert "test: 2 steps showed text cut" in lines and "in 2 episodes the task prompt itself was cut" in lines
    finally:
        run.close()
    undeclared = {r: RoleConfig(backend="scripted") for r in ("executor", "proposer", "builder", "judge")}
    run = Run(Config(store=str(tmp_path / "store2"), roles=undeclared), None, None)
    try:  # a backend that declares no window is taken for a current API model
        assert run.context(seed(tmp_path)).context_window == 32768
    finally:
        run.close()
