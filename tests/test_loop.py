"""End to end through the core loop with scripted roles and a deterministic benchmark."""
from pathlib import Path

import pytest

from evolver import plugins
from evolver.config import Config, RoleConfig
from evolver.loop import run_loop
from evolver.programs import ProgramRepo
from evolver.run import Run
from evolver.store import Store

TOY = Path(__file__).with_name("toybench.py")


def make_config(tmp_path, rule, **loop):
    roles = {r: RoleConfig(backend="scripted", options={"rule": rule}) for r in ("executor", "proposer", "builder", "judge")}
    return Config(benchmark="upper", benchmark_options={}, store=str(tmp_path / "store"), roles=roles,
                  proposers=["evoskill"],
                  loop={"iterations": 2, "train_per_category": 2, "dev_per_category": 2, "test_per_category": 2,
                        "candidates_per_iteration": 1, **loop})


def run_once(tmp_path, rule, **loop):
    plugins.load_local(TOY)
    cfg = make_config(tmp_path, rule, **loop)
    store = Store(Path(cfg.store) / "evolver.duckdb")
    repo = ProgramRepo(Path(cfg.store))
    run = Run(cfg, store, repo)
    try:
        summary = run_loop(run)
    finally:
        run.close()
    return run, store, repo, summary


def test_a_skill_that_helps_is_admitted_tagged_and_logged(tmp_path):
    import toybench
    run, store, repo, summary = run_once(tmp_path, toybench.make_rule())
    try:
        assert summary["test"]["seed"]["score"] == 0.0
        best = summary["best"]
        assert best != "seed" and summary["test"][best]["score"] == 1.0
        props = store.proposals(run.id)
        assert props[0]["status"] == "admitted" and props[0]["operator"] == "create"
        assert f"frontier/{best}" in repo.tags("frontier/")
        log = {row["id"]: row for row in repo.log()}
        assert log[best]["parent"] == "seed" and log[best]["scores"]["dev_score"] == 1.0
        assert "shout-words" in repo.show(best)
        # The second iteration has no failures (the best program wins everything) and is skipped.
        its = store.iterations(run.id)
        assert [i["status"] for i in its] == ["finished", "finished"]
        report = Path(summary["report"]).read_text()
        assert "| seed (baseline) | 0.000" in report and "shout-words" in report
        assert "## Monitor" in report and "No action or tool call was flagged." in report
    finally:
        store.close()


def test_a_second_run_in_the_same_store_finds_the_rollouts_it_took_from_the_cache(tmp_path):
    """A run's rollouts that another run already played come from the cache, unplayed, and are still
    the run's episodes: a proposer that reads the run's training episodes (the skill miner) sees them."""
    import toybench
    first, store, repo, _ = run_once(tmp_path, toybench.make_rule(), iterations=1)
    try:
        again = Run(first.config, store, repo)
        try:
            run_loop(again)
        finally:
            again.close()
        theirs = {e.id for e in store.episodes(run_id=first.id, split="train", program_id="seed")}
        mine = store.episodes(run_id=again.id, split="train", with_steps=True)
        assert len(theirs) == 4 and theirs <= {e.id for e in mine}
        assert all(e.run_id == first.id and e.steps for e in mine if e.id in theirs)
        assert store.query("SELECT count(*) FROM episodes WHERE run_id = ? AND program_id = 'seed' "
                           "AND split = 'train'", [again.id])[1] == [(0,)]  # none played again
    finally:
        store.close()


def test_a_benchmarks_skill_pack_is_opt_in_and_the_report_labels_programs_that_carry_it(tmp_path, monkeypatch):
    import toybench

    from evolver.skills import write_skill
    pack = tmp_path / "pack"
    write_skill(pack, "count-letters", "Use when a word must be spelled.", "Count the letters first.",
                meta={"metadata": {"hand_written": True}})
    plugins.load_local(TOY)
    monkeypatch.setattr(plugins.get("benchmark", "upper").factory, "skill_packs", {"toy-experts": pack})
    run, store, repo, summary = run_once(tmp_path / "plain", toybench.make_rule(), iterations=1)
    try:  # the default seed: the benchmark's seed_skills (none), no pack
        assert summary["hand_written"] == {} and "hand-written" not in Path(summary["report"]).read_text()
    finally:
        store.close()
    cfg = make_config(tmp_path / "pack-run", toybench.make_rule(), iterations=1).model_copy(
        update={"seed_skills": ["toy-experts"]})
    store, repo = Store(Path(cfg.store) / "evolver.duckdb"), ProgramRepo(Path(cfg.store))
    run = Run(cfg, store, repo)
    try:
        summary = run_loop(run)
        assert "skills/count-letters/SKILL.md" in repo.files("seed")
        assert summary["hand_written"]["seed"] == ["count-letters"]
        assert set(summary["hand_written"]) == set(summary["test"])  # the evolved best inherits it
        report = Path(summary["report"]).read_text()
        assert "| seed (baseline) (hand-written pack) |" in report
        assert "carry skills written by hand for this benchmark, not learned: count-letters." in report
    finally:
        run.close()
        store.close()


def test_malformed_and_leaking_skills_are_rejected_with_reasons(tmp_path):
    import toybench
    leaky = toybench.make_rule(body="Answer APPLE for apple and RIVER for river.\n2. Say upper/train/0 first.")
    run, store, repo, summary = run_once(tmp_path / "leak", leaky, iterations=1)
    try:
        props = store.proposals(run.id)
        assert props[0]["status"] == "rejected" and "leaks" in props[0]["reason"]
        assert summary["best"] == "seed"
    finally:
        store.close()
    empty = toybench.make_rule(body="", description="x")
    run, store, repo, summary = run_once(tmp_path / "empty", empty, iterations=1)
    try:
        props = store.proposals(run.id)
        assert props[0]["status"] == "rejected" and "builder" in props[0]["reason"]
    finally:
        store.close()


BROKEN_PROPOSER = '''
from pathlib import Path
from evolver.hookspecs import hookimpl

GOOD = Path(%r).read_text()

class Breaker:
    def __init__(self, run, **_):
        self.run = run

    def propose(self, ctx):
        d1 = ctx.new_draft("harness", "a harness that does not import")
        (Path(d1.path) / "harness" / "harness.py").write_text("import not_a_module_anywhere\\n")
        d2 = ctx.new_draft("harness", "a harness that crashes while playing")
        (Path(d2.path) / "harness" / "harness.py").write_text(
            GOOD.replace("def next_call(self, state, obs):", "def next_call(self, state, obs):\\n        raise RuntimeError('boom')"))
        d3 = ctx.new_draft("noop", "changes nothing")
        d5 = ctx.new_draft("harness", "a harness that never returns")
        (Path(d5.path) / "harness" / "harness.py").write_text(
            GOOD.replace("def next_call(self, state, obs):", "def next_call(self, state, obs):\\n        while True:\\n            pass"))
        d4 = ctx.new_draft("create", "a SKILL.md without front matter")
        (Path(d4.path) / "skills" / "oops").mkdir()
        (Path(d4.path) / "skills" / "oops" / "SKILL.md").write_text("just text, no front matter")
        return [d1, d2, d3, d4, d5]

@hookimpl
def register_proposers(register):
    register("breaker", Breaker)
'''


def test_broken_candidates_are_rejected_with_their_reasons_and_the_run_goes_on(tmp_path, monkeypatch):
    import toybench
    from evolver.harness import SEED_DIR
    import evolver.lockstep
    monkeypatch.setattr(evolver.lockstep, "HARNESS_CALL_S", 1.0)  # keep the hanging candidate's test short
    plugin = tmp_path / "breaker.py"
    plugin.write_text(BROKEN_PROPOSER % str(SEED_DIR / "harness" / "harness.py"))
    plugins.load_local(plugin)
    plugins.load_local(TOY)
    cfg = make_config(tmp_path, toybench.make_rule(), iterations=3, candidates_per_iteration=5, patience=1)
    cfg.proposers = ["breaker"]
    store = Store(Path(cfg.store) / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(Path(cfg.store)))
    import evolver.loop
    smoke_limits = []
    real_play = evolver.loop.play

    def play(run, jobs, *a, **kw):
        if kw.get("purpose") == "smoke":
            smoke_limits.extend(t.max_steps for _, tasks in jobs for t in tasks)
        return real_play(run, jobs, *a, **kw)
    monkeypatch.setattr(evolver.loop, "play", play)
    try:
        summary = run_loop(run)
        assert smoke_limits and all(n == evolver.loop.SMOKE_STEPS for n in smoke_limits)  # cut short
        reasons = {p["hypothesis"]: (p["status"], p["reason"]) for p in store.proposals(run.id)}
        assert reasons["a harness that does not import"][0] == "rejected"
        assert "not_a_module_anywhere" in reasons["a harness that does not import"][1]
        assert reasons["a harness that crashes while playing"][0] == "rejected"
        assert "smoke episode failed" in reasons["a harness that crashes while playing"][1]
        assert "boom" in reasons["a harness that crashes while playing"][1]
        assert reasons["changes nothing"] == ("rejected", "no change from its parent")
        status, reason = reasons["a harness that never returns"]
        assert status == "rejected" and "longer than 1s" in reason
        status, reason = reasons["a SKILL.md without front matter"]
        assert status == "rejected" and reason.startswith("malformed skill") and "oops/SKILL.md" in reason
        assert summary["best"] == "seed"
        # patience 1: the first iteration admitted nothing, so no second one started
        assert [i["iteration"] for i in store.iterations(run.id)] == [0]
    finally:
        run.close()
        store.close()


DAMAGED_PROPOSER = '''
from evolver import hookimpl
from evolver.errors import RepoDamagedError, StoreIOError

class Damaged:
    def __init__(self, run, **_):
        pass

    def propose(self, ctx):
        ctx.new_draft("create", "meets a damaged repository")
        raise %s("the program repository is damaged")

@hookimpl
def register_proposers(register):
    register("damaged", Damaged)
'''


@pytest.mark.parametrize("error", ["RepoDamagedError", "StoreIOError"])
def test_a_damaged_repository_or_store_met_by_a_proposer_stops_the_run(tmp_path, error):
    import toybench
    import evolver.errors
    plugin = tmp_path / "damaged.py"
    plugin.write_text(DAMAGED_PROPOSER % error)
    plugins.load_local(plugin)
    plugins.load_local(TOY)
    cfg = make_config(tmp_path, toybench.make_rule(), iterations=2)
    cfg.proposers = ["damaged"]
    store = Store(Path(cfg.store) / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(Path(cfg.store)))
    try:  # a proposer's ordinary failure rejects its drafts and the run goes on; this one is systemic
        with pytest.raises(getattr(evolver.errors, error), match="damaged"):
            run_loop(run)
    finally:
        run.close()
        store.close()


def test_resume_restores_the_frontier_and_does_not_replay_the_seed(tmp_path):
    import toybench
    plugins.load_local(TOY)
    cfg = make_config(tmp_path, toybench.make_rule(), iterations=1, objectives=["score:max"])
    store = Store(Path(cfg.store) / "evolver.duckdb")
    repo = ProgramRepo(Path(cfg.store))
    run = Run(cfg, store, repo)
    try:
        run_loop(run)
        assert run.frontier.ids() == ["p0001"]  # one objective: the seed was evicted
        evict = [e for e in store.frontier_events(run.id) if e["event"] == "evict"]
        assert [(e["program_id"], e["metrics"]["score"], e["reason"]) for e in evict] == [("seed", 0.0, "displaced by p0001")]
        episodes_before = len(store.episodes(run_id=run.id))
        cfg2 = cfg.model_copy(update={"loop": cfg.loop.model_copy(update={"iterations": 2})})
        again = Run(cfg2, store, repo, run_id=run.id, resumed=True)
        summary = run_loop(again)
        events = [e["event"] for e in store.frontier_events(run.id)]
        assert events.count("seed") == 1 and again.frontier.ids() == ["p0001"]
        assert summary["best"] == "p0001"
        # iteration 1 found no failures (p0001 wins every training task): nothing new was played
        # except its rollouts, and nothing was stored twice
        _, dup = store.query("SELECT cache_key, purpose FROM episodes WHERE run_id = ? GROUP BY 1, 2 "
                             "HAVING count(*) > 1", [run.id])
        assert dup == [] and len(store.episodes(run_id=run.id)) >= episodes_before
    finally:
        run.close()
        store.close()


PATIENT_PROPOSER = '''
import json
from evolver import hookimpl

class Patient:
    needs_failures = False

    def __init__(self, run, **_):
        pass

    def propose(self, ctx):
        with open(%r, "a") as fh:
            fh.write(json.dumps([ctx.iteration, len(ctx.failures), ctx.n]) + "\\n")
        return []

@hookimpl
def register_proposers(register):
    register("patient", Patient)
'''


def test_an_iteration_without_failures_asks_the_proposers_that_need_none(tmp_path):
    import json

    import toybench
    calls = tmp_path / "calls.jsonl"
    plugin = tmp_path / "patient.py"
    plugin.write_text(PATIENT_PROPOSER % str(calls))
    plugins.load_local(plugin)
    plugins.load_local(TOY)
    cfg = make_config(tmp_path, toybench.make_rule(), iterations=2, candidates_per_iteration=2, patience=3)
    cfg.proposers = ["evoskill", "patient"]
    store = Store(Path(cfg.store) / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(Path(cfg.store)))
    try:
        run_loop(run)
        its = store.iterations(run.id)
        assert its[0]["summary"]["admitted"] and its[0]["summary"].get("note") is None
        # iteration 1: the admitted program wins every rollout; evoskill (it needs failures) is not
        # asked, the patient proposer is, with no failures and the whole share of candidates
        assert its[1]["summary"]["failures"] == 0
        assert its[1]["summary"]["note"] == "no failures: only patient proposed"
        got = [json.loads(line) for line in calls.read_text().splitlines()]
        assert got[0][0] == 0 and got[0][1] > 0 and got[0][2] == 1
        assert got[1] == [1, 0, 2]
        assert [p["proposer"] for p in store.proposals(run.id)] == ["evoskill"]
    finally:
        run.close()
        store.close()


def test_budgets_stop_the_search(tmp_path):
    from evolver.loop import _budget_exhausted

    cfg = make_config(tmp_path, lambda req: "", max_wall_s=100, max_proposer_tokens=50, patience=2)
    run = Run(cfg, store=None, repo=None)
    assert _budget_exhausted(run, idle=0, typical_iteration_s=10) == ""
    assert "patience 2" in _budget_exhausted(run, idle=2, typical_iteration_s=10)
    assert "wall-time budget" in _budget_exhausted(run, idle=0, typical_iteration_s=150)  # would end past it
    # The first iteration always runs, even when the seed's evaluation alone spent the budget.
    run.started -= 500
    assert _budget_exhausted(run, idle=0, typical_iteration_s=0, first=True) == ""
    assert "wall-time budget" in _budget_exhausted(run, idle=0, typical_iteration_s=0)
    run.started += 500
    run.tokens.update(proposer=30, builder=25, executor=10_000)  # executor tokens do not count
    assert "proposer token budget" in _budget_exhausted(run, idle=0, typical_iteration_s=10)


WORSENER = '''
import shutil
from pathlib import Path
from evolver.hookspecs import hookimpl
from evolver.skills import write_skill

class Worsener:
    """Iteration 0: adds the skill that solves the toy benchmark. Later: swaps it for a useless one."""
    def __init__(self, run, **_):
        pass

    def propose(self, ctx):
        d = ctx.new_draft("create", "toggle")
        skills = Path(d.path) / "skills"
        had = (skills / "shout-words").exists()
        shutil.rmtree(skills / "shout-words", ignore_errors=True)
        body = "Keep every answer short and plain." if had else "Answer with the word in UPPERCASE letters."
        write_skill(skills, "brief" if had else "shout-words", "Use when asked to answer with a word.", body)
        return [d]

@hookimpl
def register_proposers(register):
    register("worsener", Worsener)
'''


def worsener_run(tmp_path, rule, size: int | None = None, **loop):
    """A two-iteration run of the toy benchmark (``size`` tasks) whose proposer is the worsener, with the
    failure threshold above 1: every episode counts as a failure, so the proposer runs on the winner too."""
    plugin = tmp_path / "worsener.py"
    plugin.write_text(WORSENER)
    plugins.load_local(plugin)
    plugins.load_local(TOY)
    cfg = make_config(tmp_path, rule, iterations=2, failure_threshold=1.01, patience=5, objectives=["score:max"],
                      **loop)
    if size is not None:
        cfg.benchmark_options = {"size": size}
    cfg.proposers = ["worsener"]
    store = Store(Path(cfg.store) / "evolver.duckdb")
    return cfg, store, Run(cfg, store, ProgramRepo(Path(cfg.store)), console=Console())


def test_staged_evaluation_stops_a_clearly_worse_candidate_after_the_probe(tmp_path):
    import toybench
    cfg, store, run = worsener_run(tmp_path, toybench.make_rule())
    try:
        summary = run_loop(run)
        first, second = store.proposals(run.id)
        assert first["status"] == "admitted"
        assert second["status"] == "discarded" and second["reason"].startswith("stopped after the probe: 0.000")
        assert "paired -1.000 [-1.000, -1.000]" in second["reason"] and "leaner on nothing" in second["reason"]
        # it played the probe (one dev task per category) and nothing more: the other 2 of 4 are saved
        assert len(store.episodes(program_id=second["candidate_id"], purpose="eval")) == 2
        assert second["scores"]["saved_episodes"] == 2 and second["scores"]["paired"]["verdict"] == "worse"
        assert "Early stopping: 1 candidates stopped before the whole dev split" in Path(summary["report"]).read_text()
        # the admitted one played the whole dev split (4 tasks) without replaying its probe
        assert len(store.episodes(program_id=first["candidate_id"], split="dev")) == 4
        assert summary["best"] == first["candidate_id"]
    finally:
        run.close()
        store.close()


@pytest.mark.parametrize("admit_early", [True, False])
def test_a_candidate_certain_to_be_admitted_stops_halfway_through_dev(tmp_path, admit_early):
    import toybench
    plugins.load_local(TOY)
    cfg = make_config(tmp_path, toybench.make_rule(), iterations=1, dev_per_category=6, objectives=["score:max"],
                      admit_early=admit_early)
    cfg.benchmark_options = {"size": 24}  # 12 dev tasks, 6 a category: the half stage (6) is past the probe (2)
    store = Store(Path(cfg.store) / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(Path(cfg.store)), console=Console())
    try:
        summary = run_loop(run)
        (prop,) = store.proposals(run.id)
        assert prop["status"] == "admitted" and summary["best"] == prop["candidate_id"]
        played = store.episodes(program_id=prop["candidate_id"], split="dev")
        report = Path(summary["report"]).read_text()
        if not admit_early:
            assert len(played) == 12 and "saved_episodes" not in prop["scores"]
            assert "Early stopping" not in report
            return
        # the seed scores 0 on every task and the candidate 1: +1 on all 6 tasks passes even at the interim level
        assert len(played) == 6 and prop["scores"]["dev_tasks"] == 6 and prop["scores"]["saved_episodes"] == 6
        certain = prop["scores"]["certain"]
        assert certain["weakest"]["versus"] == "seed" and certain["weakest"]["n"] == 6
        assert certain["level"] > cfg.loop.gate_level
        assert any("stopped after 6 of 12 dev tasks, certain to be admitted" in line for line in run.console.lines)
        assert "1 stopped when already certain to be admitted" in report and "6 dev episodes not played" in report
        assert "| 1.000 (6 tasks) |" in report
        evals = [r for r in store.query("SELECT program_id, n FROM evaluations WHERE run_id = ? AND split = 'dev'",
                                        [run.id])[1] if r[0] == prop["candidate_id"]]
        assert evals == [(prop["candidate_id"], 6)]
        assert summary["test"][prop["candidate_id"]]["score"] == 1.0  # the test split is played whole
    finally:
        run.close()
        store.close()


def test_a_member_admitted_early_plays_the_rest_of_dev_before_the_next_candidate_is_judged(tmp_path):
    """Iteration 0's candidate is admitted on 6 of 12 dev tasks; before iteration 1's candidate is judged
    against it, it plays the other 6 (its first 6 from the cache), so the paired tests and its score are
    the whole split's."""
    import toybench
    cfg, store, run = worsener_run(tmp_path, toybench.make_rule(), dev_per_category=6, size=24)
    try:
        summary = run_loop(run)
        first, second = store.proposals(run.id)
        member = first["candidate_id"]
        assert first["status"] == "admitted" and first["scores"]["dev_tasks"] == 6  # the decision as it was made
        assert second["status"] == "discarded"
        assert len(store.episodes(program_id=member, split="dev")) == 12  # 6 more, none twice
        (line,) = [x for x in run.console.lines if "admitted early" in x]
        assert line.startswith(f"{member}, admitted early on 6 dev tasks, played the other 6") and "on all 12" in line
        (kept,) = [m for m in summary["frontier"]["members"] if m["program_id"] == member]
        assert len(kept["per_task"]["score"]) == 12 and kept["metrics"]["score"] == 1.0
        judged = next(i for i, x in enumerate(run.console.lines) if x.startswith(second["candidate_id"]))
        assert run.console.lines.index(line) < judged  # completed before the next candidate was judged
        report = Path(summary["report"]).read_text()
        assert "1 of them played the rest of dev later" in report  # its 6 saved episodes were played after all
        assert f"; {second['scores']['saved_episodes']} dev episodes not played." in report
    finally:
        run.close()
        store.close()


class Console:
    def __init__(self):
        self.lines = []

    def log(self, message):
        self.lines.append(message)


def test_admission_evidence_and_the_best_of_n_baseline_reach_the_log_store_and_report(tmp_path):
    import toybench
    plugins.load_local(TOY)
    greedy = toybench.make_rule()

    def coin(req):
        """The executor: greedy as the toy rule; sampled, right on the tasks its seed favours."""
        answer = greedy(req)
        sampled_right = getattr(req, "temperature", 0) > 0 and req.seed is not None and req.seed % 3 == 0
        return answer.upper() if sampled_right and "Answer with the word" in str(req.messages[-1].content) else answer
    cfg, store, run = worsener_run(tmp_path, coin, best_of_n=True)
    try:
        summary = run_loop(run)
        first, second = store.proposals(run.id)
        assert "p0001 admitted: dev 1.000 vs seed 0.000, paired +1.000 [1.000, 1.000] on 4 tasks; displaces seed" \
            in run.console.lines
        assert first["scores"]["paired"] | {"level": 0} == {
            "method": "bootstrap", "n": 4, "episodes": 1.0, "diff": 1.0, "low": 1.0, "high": 1.0, "level": 0,
            "verdict": "better", "p_value": None, "versus": "seed"}
        admit = next(e for e in store.frontier_events(run.id) if e["event"] == "admit")
        assert admit["metrics"]["paired"]["versus"] == "seed" and "score better: paired +1.000" in admit["reason"]
        # best of N: N = 2 candidates played on dev (one stopped after the probe); the greedy seed is unchanged
        bon = summary["best_of_n"]
        assert bon["n"] == 2 and bon["seeds"] == [0, 1] and bon["dev"] == max(bon["dev_scores"])
        assert summary["test"]["seed"]["score"] == 0.0 and len(set(bon["dev_scores"])) > 1  # the seeds differ
        assert set(summary["paired"]) == {"best_vs_seed", "best_of_n_vs_seed", "best_vs_best_of_n"}
        assert summary["paired"]["best_vs_seed"]["low"] == 1.0
        baseline_eps = store.episodes(run_id=run.id, purpose="baseline")
        assert len(baseline_eps) == 2 * 4 + 4 and all("~sampled(t=0.7)" in e.model for e in baseline_eps)
        report = Path(summary["report"]).read_text()
        assert f"| seed, best of 2 (no evolution) | {bon['test']['score']:.3f} |" in report
        assert "Best vs seed on test: +1.000, 95% bootstrap interval [1.000, 1.000] on 4 tasks (paired)." in report
        assert "Best-of-2 vs seed on test: " in report and "Best vs best-of-2 on test: " in report
        assert "| p0001 | worsener | create | seed | admitted | 1.000 | +1.000 [1.000, 1.000] vs seed, n=4 |" in report
    finally:
        run.close()
        store.close()


TWINS = '''
from pathlib import Path
from evolver.hookspecs import hookimpl
from evolver.skills import write_skill

class Twins:
    """Two candidates an iteration, both with the skill that solves the toy benchmark."""
    def __init__(self, run, **_):
        pass

    def propose(self, ctx):
        drafts = []
        for name in ("shout-words", "capital-words"):
            d = ctx.new_draft("create", name)
            write_skill(Path(d.path) / "skills", name, "Use when asked to answer with a word.",
                        "Answer with the word in UPPERCASE letters.")
            drafts.append(d)
        return drafts

@hookimpl
def register_proposers(register):
    register("twins", Twins)
'''


def test_best_of_n_dev_episodes_play_beside_the_candidates_and_the_end_reuses_them(tmp_path):
    import toybench
    plugins.load_local(TOY)
    greedy = toybench.make_rule()
    statuses = []  # the run's status at each sampled model call

    def coin(req):
        if getattr(req, "temperature", 0) > 0:
            statuses.append(holder[0].status)
        return greedy(req)
    plugin = tmp_path / "twins.py"
    plugin.write_text(TWINS)
    plugins.load_local(plugin)
    cfg = make_config(tmp_path, coin, iterations=1, candidates_per_iteration=2, objectives=["score:max"],
                      best_of_n=True)
    cfg.proposers = ["twins"]
    store = Store(Path(cfg.store) / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(Path(cfg.store)), console=Console())
    holder = [run]
    try:
        summary = run_loop(run)
        assert [r["status"] for r in store.proposals(run.id)].count("discarded") + \
            [r["status"] for r in store.proposals(run.id)].count("admitted") == 2
        bon = summary["best_of_n"]
        assert bon["n"] == 2 and bon["seeds"] == [0, 1] and len(bon["dev_scores"]) == 2
        # the two sampled seeds played on dev in the candidates' lockstep (2 x 4 + 2 x 4 episodes), never
        # on their own at the end ("best-of-2 on dev k/8")
        dev_calls = [s for s in statuses if "dev" in s]
        assert len(dev_calls) == 8 and all(s.startswith("dev ") and s.endswith("/16") for s in dev_calls)
        baseline_eps = store.episodes(run_id=run.id, purpose="baseline")
        assert len(baseline_eps) == 2 * 4 + 4  # 2 seeds on 4 dev tasks, the picked one on 4 test tasks
    finally:
        run.close()
        store.close()


def test_best_of_n_can_be_switched_off(tmp_path):
    import toybench
    run, store, repo, summary = run_once(tmp_path, toybench.make_rule(), iterations=1, best_of_n=False)
    try:
        assert "best_of_n" not in summary and set(summary["paired"]) == {"best_vs_seed"}
        assert store.episodes(run_id=run.id, purpose="baseline") == []
    finally:
        store.close()


def test_a_sampling_executor_plays_several_episodes_per_dev_task_and_the_gate_averages_them(tmp_path):
    import toybench
    plugins.load_local(TOY)
    greedy = toybench.make_rule()

    def coin(req):
        answer = greedy(req)
        lucky = req.temperature > 0 and req.seed is not None and req.seed % 3 == 0
        return answer.upper() if lucky and "Answer with the word" in req.messages[-1].content else answer
    cfg = make_config(tmp_path, coin, iterations=1, objectives=["score:max"], best_of_n=False)
    cfg.roles["executor"].temperature = 0.7
    store = Store(Path(cfg.store) / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(Path(cfg.store)), console=Console())
    try:
        summary = run_loop(run)
        seed_dev = store.evaluations(run.id, "seed", "dev")[0]
        assert seed_dev["n"] == 3 * 4  # dev_episodes_per_task None: 3 when sampled
        dev_eps = store.episodes(run_id=run.id, program_id="seed", split="dev", purpose="eval")
        assert sorted({e.seed for e in dev_eps}) == [0, 1, 2] and all("~sampled(t=0.7)" in e.model for e in dev_eps)
        assert 0 < seed_dev["score"] < 1  # the coin: some sampled episodes right, others not
        paired = store.proposals(run.id)[0]["scores"]["paired"]
        assert paired["episodes"] == 3.0 and paired["n"] == 4 and paired["verdict"] == "better"
        assert any(line.startswith("p0001 admitted: dev 1.000 vs seed ") and "on 4 tasks x 3 episodes" in line
                   for line in run.console.lines)
        member = summary["frontier"]["members"][0]
        assert all(len(v) == 3 for v in member["per_task"]["score"].values())
    finally:
        run.close()
        store.close()


def test_the_stages_of_an_evaluation_grow_by_category_in_dev_order():
    from types import SimpleNamespace as T

    from evolver.selection import probe_tasks
    dev = [T(category=c, i=i) for i, c in enumerate("aabbbbc")]
    assert [t.i for t in probe_tasks(dev)] == [0, 2, 6]  # the first of each category
    assert [t.i for t in probe_tasks(dev, 0.5)] == [0, 2, 3, 6]  # ceil(half) of each
    assert probe_tasks(dev, 1.0) == dev


def test_a_candidate_stops_early_only_when_worse_by_the_test_and_leaner_on_nothing():
    from evolver.config import LoopConfig
    from evolver.selection import _hopeless
    from evolver.types import Episode, Task

    def eps(scores, tokens):
        return [Episode(task=Task(f"t{i}", "b", "dev", "c"), program_id="p", program_hash="h", model="m", seed=0,
                        score=s, prompt_tokens=tokens) for i, s in enumerate(scores)]
    cfg = LoopConfig(objectives=["score:max", "context_tokens:min"])
    parent = eps([1, 1, 1, 1, 1, 1], 100)
    assert _hopeless(cfg, eps([0] * 6, 100), parent)[0].verdict == "worse"  # worse and no leaner: stop
    assert _hopeless(cfg, eps([0] * 6, 50), parent) is None  # worse but leaner: a trade-off, it goes on
    assert _hopeless(cfg, eps([1, 1, 1, 1, 1, 0], 100), parent) is None  # one task lost: within noise
    assert _hopeless(cfg.model_copy(update={"gate": "none"}), eps([0] * 6, 100), parent) is not None


@pytest.mark.parametrize("pilot_s", [0.0, 10_000.0])
def test_the_pilot_rollouts_count_in_the_first_iterations_time(tmp_path, monkeypatch, pilot_s):
    """The first iteration's rollouts are played before the seed's evaluation (the estimate's pilot); the
    wall budget still judges that iteration with their time, so a long pilot leaves no room for a second."""
    import toybench

    import evolver.loop
    real = evolver.loop._estimate
    monkeypatch.setattr(evolver.loop, "_estimate",
                        lambda run, seed, data, proposers: real(run, seed, data, proposers) | {"pilot_s": pilot_s})
    run, store, _, _ = run_once(tmp_path, toybench.make_rule(), iterations=2, max_wall_s=5_000,
                                failure_threshold=1.01, patience=5)
    try:
        assert len(store.iterations(run.id)) == (1 if pilot_s else 2)
    finally:
        store.close()


def test_a_resumed_run_counts_the_work_done_before_its_stop_against_its_wall_time(tmp_path):
    import toybench
    run, store, repo, _ = run_once(tmp_path, toybench.make_rule(), iterations=1, max_wall_s=10_000)
    run_id = run.id
    store = Store(Path(run.config.store) / "evolver.duckdb")
    try:  # iteration 0 took 2,000 s of work; the stop itself lay between then and now
        store.query("UPDATE iterations SET started_at = started_at - INTERVAL 3000 SECOND, "
                    "finished_at = started_at - INTERVAL 1000 SECOND WHERE run_id = ?", [run_id])
        store.query("UPDATE runs SET created_at = created_at - INTERVAL 3100 SECOND WHERE run_id = ?", [run_id])
        cfg = make_config(tmp_path, toybench.make_rule(), iterations=3, max_wall_s=1500)
        again = Run(cfg, store, ProgramRepo(Path(cfg.store)), run_id=run_id, resumed=True, console=Console())
        try:
            from evolver.loop import _spent_before
            assert 2090 <= _spent_before(again) <= 2110  # seed evaluation ~100 s + iteration 0's 2,000 s
            run_loop(again)
        finally:
            again.close()
        assert len(store.iterations(run_id)) == 1  # no second iteration: 1,500 s were spent already
        assert any("wall-time budget of 1500s" in line for line in again.console.lines)
    finally:
        store.close()


def test_the_final_test_plays_the_seed_and_the_best_unless_asked_for_the_whole_frontier(tmp_path):
    import toybench
    from evolver.final import tested
    run, store, repo, summary = run_once(tmp_path, toybench.make_rule(), iterations=1, best_of_n=False)
    try:
        assert summary["best"] != "seed"
        played = {ep.program_id for ep in store.episodes(run_id=run.id) if ep.task.split == "test"}
        assert played == set(summary["test"]) == {"seed", summary["best"]}
    finally:
        store.close()
    assert tested(["p0002", "seed", "p0001"], "p0001", False) == ["seed", "p0001"]
    assert tested(["p0002", "seed", "p0001"], "p0001", True) == ["seed", "p0002", "p0001"]
    assert tested(["seed"], "seed", False) == ["seed"]  # nothing evolved: the seed alone


def test_the_run_says_before_it_starts_the_most_it_will_play_and_stays_within_it(tmp_path):
    import toybench
    run, store, repo, summary = run_once(tmp_path, toybench.make_rule(), iterations=2, candidates_per_iteration=2)
    try:
        plan = summary["plan"]
        dev, test = (len(run.benchmark.tasks(s, per_category=2)) for s in ("dev", "test"))
        rollouts = 2 * len(run.benchmark.categories)  # train_per_category x categories
        assert plan["parts"] == {"seed dev": dev, "iterations": 2 * (rollouts + 2 * (1 + dev)), "final test": 2 * test}
        assert plan["episodes"] == sum(plan["parts"].values())
        played = store.query("SELECT count(*) FROM episodes WHERE run_id = ?", [run.id])[1][0][0]
        assert 0 < played == summary["episodes_stored"] <= plan["episodes"]
        assert 0 < summary["spend"]["executor"]["calls"] <= plan["calls"]
        report = Path(summary["report"]).read_text()
        assert f"would play at most {plan['episodes']} episodes" in report
        assert f"It stored {played} episodes" in report
    finally:
        store.close()


QUIET_PROPOSERS = '''
from evolver import hookimpl


class Sayer:
    needs_failures = False

    def __init__(self, run, **options):
        self.run = run

    def propose(self, ctx):
        self.run.log("sayer: nothing to learn from:\\n  every rollout was alike")
        return []


class Mute(Sayer):
    def propose(self, ctx):
        return []


@hookimpl
def register_proposers(register):
    register("sayer", Sayer)
    register("mute", Mute)
'''


def test_a_proposer_that_builds_nothing_is_named_in_the_report_with_its_reason(tmp_path):
    import toybench
    plugin = tmp_path / "quiet.py"
    plugin.write_text(QUIET_PROPOSERS)
    plugins.load_local(plugin)
    plugins.load_local(TOY)
    cfg = make_config(tmp_path, toybench.make_rule(), iterations=1, candidates_per_iteration=2)
    cfg.proposers = ["sayer", "mute"]
    store = Store(Path(cfg.store) / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(Path(cfg.store)))
    try:
        summary = run_loop(run)
        (it,) = store.iterations(run.id)
        assert it["summary"]["quiet"] == {"sayer": "nothing to learn from: every rollout was alike",
                                          "mute": "it returned no draft and said nothing"}
        text = Path(summary["report"]).read_text()
        assert "- iteration 0: sayer built nothing: nothing to learn from: every rollout was alike" in text
        assert "- iteration 0: mute built nothing: it returned no draft and said nothing" in text
        assert run._heard == []  # nothing listens once the proposers are done
    finally:
        run.close()
        store.close()


def test_an_iteration_skipped_whole_is_named_with_its_note():
    from evolver.report import quiet_lines
    its = [{"iteration": 0, "summary": {"candidates": ["p0001"], "note": "no failures: only miner proposed"}},
           {"iteration": 1, "summary": {"candidates": [], "note": "no failures: skipped"}}]
    assert quiet_lines(its)[-1:] == ["- iteration 1: no failures: skipped"]  # iteration 0 built a candidate
    assert quiet_lines(its[:1]) == []
