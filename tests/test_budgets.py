"""Text budgets that follow the model: a long task reaches a model that can read it whole, and a cut
for a small one is visible in the trace and named in the report (written as an outside author would,
against the public API)."""
from pathlib import Path

import pytest

from evolver import Benchmark, Env, Observation, Task, run_episodes
from evolver.harness import make_harness, program_context
from evolver.backends.scripted import ScriptedBackend
from evolver.config import Config, RoleConfig
from evolver.seeding import seed_files
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
        seed_files(into=root)
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
    assert "Before its search it estimated ~" in r.output  # the partial report keeps the estimate
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
    assert ledger.spent["executor"] == [100, 1, 0.0] and ledger.held["executor"] == [200, 1, 0.0]


def test_a_cost_cap_counts_each_role_at_its_models_price_and_refuses_what_could_cross_it():
    """budget.cost with a price table: a request is priced at its most before it is sent (prompt at the
    input price, reply at the output price), refused when it could cross the cap, and settled at what it
    spent; a model without a price costs nothing; every role's spend is kept for the report."""
    from evolver.budget import BudgetExceeded, Ledger, most_parts
    from evolver.config import BudgetConfig
    from evolver.models import CountingBackend
    from evolver.report import spend_note
    from evolver.types import GenRequest, Message

    caps = BudgetConfig(cost=0.001, prices={"api-model": {"input": 2.0, "output": 10.0}})
    assert caps.price("api-model").output == 10.0 and caps.price("local").input == 0.0
    ledger, counter = Ledger(caps), {}
    paid = CountingBackend(ScriptedBackend(rule=lambda r: "ok done", model="api-model"), counter, "proposer", ledger,
                           caps.price("api-model"))
    free = CountingBackend(ScriptedBackend(rule=lambda r: "ok", model="local"), counter, "executor", ledger,
                           caps.price("local"))
    req = GenRequest(messages=[Message("user", "word " * 20)], max_tokens=40)
    prompt, reply = most_parts(paid.inner, req)
    assert (prompt, reply) == (20 + 32, 40)
    most = (prompt * 2.0 + reply * 10.0) / 1e6  # 0.000504: one request fits the cap, two in flight do not
    (out,) = paid.generate([req])
    spent = (out.prompt_tokens * 2.0 + out.completion_tokens * 10.0) / 1e6
    assert ledger.spent["proposer"][2] == pytest.approx(spent) and ledger.held["proposer"][2] == pytest.approx(0)
    for _ in range(200):  # the local model's calls cost nothing, however many
        free.generate([req])
    assert ledger.spent["executor"][2] == 0.0 and ledger.spent["executor"][1] == 200
    paid.generate([req])
    with pytest.raises(BudgetExceeded, match=r"budget.cost = 0.001: .* spent or in flight"):
        paid.generate([req, req])  # 2 x most on top of what was spent could cross it: nothing is sent
    assert ledger.spent["proposer"][1] == 2 and ledger.spend()["proposer"]["cost"] <= 0.001 - most
    assert spend_note(ledger.spend()["proposer"]) == f" (2 calls, cost {ledger.spend()['proposer']['cost']:.4g})"
    assert spend_note(ledger.spend()["executor"]) == " (200 calls)"


def test_a_cost_cap_without_prices_is_refused_with_the_key_to_set():
    from pydantic import ValidationError

    from evolver.config import BudgetConfig

    with pytest.raises(ValidationError, match=r"a cost cap needs prices: set budget.prices"):
        BudgetConfig(roles={"proposer": {"cost": 1.0}})
    assert BudgetConfig(cost=1.0, prices={"*": {"input": 1.0}}).price("anything").input == 1.0
