"""Text budgets that follow the model: a long task reaches a model that can read it whole, and a cut
for a small one is visible in the trace and named in the report (written as an outside author would,
against the public API)."""
from pathlib import Path

import pytest

from evolver import Benchmark, Env, Observation, Task, run_episodes
from evolver.harness import make_harness, program_context
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
                           harness_factory=make_harness)
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


def _stored_tokens(store, run_id):
    _, rows = store.query("SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) FROM episodes WHERE run_id = ?",
                          [run_id])
    return rows[0][0]


def test_a_run_never_stores_more_tokens_than_its_budget_and_resumes_with_a_larger_one(tmp_path, monkeypatch):
    """budget.tokens = N: every request is refused before it is sent when it could cross N, counting what
    is in flight at its most; the run stops with a partial report and resumes with a larger budget."""
    from click.testing import CliRunner

    from evolver.cli import cli
    from evolver.store import Store

    monkeypatch.chdir(tmp_path)
    toy = str(Path(__file__).with_name("toybench.py"))
    roles = [f"--set=roles.{r}.backend=toyrule" for r in ("executor", "proposer", "builder", "judge")]

    def args(store):
        return ["--plugin", toy, "--store", str(tmp_path / store), "--set=benchmark=upper", "--set=benchmark_options={}",
                "--set=proposers=[\"evoskill\"]", *roles, "--set=loop.train_per_category=1"]
    r = CliRunner().invoke(cli, args("free") + ["run", "--iterations", "1"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    with Store(tmp_path / "free" / "evolver.duckdb", read_only=True) as store:
        free = store.latest_run()
        spent = sum(free["summary"]["tokens"].values())
    assert spent > 100
    cap = spent // 2
    r = CliRunner().invoke(cli, args("capped") + [f"--set=budget.tokens={cap}", "run", "--iterations", "1"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "stopped at its budget: budget.tokens = " in r.output and "(partial)" in r.output
    with Store(tmp_path / "capped" / "evolver.duckdb", read_only=True) as store:
        row = store.latest_run()
        assert row["status"] == "stopped" and "budget.tokens" in row["summary"]["stopped"]
        assert 0 < sum(row["summary"]["tokens"].values()) <= cap
        assert _stored_tokens(store, row["run_id"]) <= cap
    r = CliRunner().invoke(cli, args("capped") + ["run", "--resume", f"--set=budget.tokens={spent * 10}"],
                           catch_exceptions=False)
    assert r.exit_code == 0 and "report:" in r.output, r.output
    with Store(tmp_path / "capped" / "evolver.duckdb", read_only=True) as store:
        again = store.latest_run()
        assert again["run_id"] == row["run_id"] and again["status"] == "finished"


def test_a_role_cap_refuses_that_role_alone_and_in_flight_work_counts_at_its_most():
    from evolver.budget import BudgetExceeded, Ledger, most_tokens
    from evolver.config import BudgetConfig
    from evolver.types import ChoiceRequest, GenRequest, Message

    ledger = Ledger(BudgetConfig(tokens=1000, roles={"proposer": {"calls": 2}}))
    backend = ScriptedBackend()  # counts words
    req = GenRequest(messages=[Message("user", "one two three")], max_tokens=10)
    assert most_tokens(backend, req) == 3 + 16 + 16 + 10
    choice = ChoiceRequest(messages=[Message("user", "pick")], options=["a b c d e f g h i j k l m n o p q r s t u v w "
                                                                         "x y z aa bb cc dd ee"])
    assert most_tokens(backend, choice) == 1 + 32 + 31 + 4
    ledger.reserve("proposer", 45, 1)
    ledger.reserve("proposer", 45, 1)
    with pytest.raises(BudgetExceeded, match=r"budget.roles.proposer.calls = 2"):
        ledger.reserve("proposer", 1, 1)
    ledger.reserve("executor", 800, 1)  # another role: only the total binds it
    with pytest.raises(BudgetExceeded, match=r"budget.tokens = 1000: 890 spent or in flight"):
        ledger.reserve("executor", 200, 1)
    ledger.settle("executor", 800, 1, 100, 1)  # it came back having spent 100
    ledger.reserve("executor", 200, 1)
    assert ledger.spent["executor"] == [100, 1] and ledger.held["executor"] == [200, 1]
