"""EvoSkill's parts: plan parsing, the documented cut ladder, version bumps, and the merge operator."""
import sys
from pathlib import Path


from evolver import plugins
from evolver.config import Config, RoleConfig
from evolver.loop import run_loop
from evolver.programs import ProgramRepo
from evolver.run import Run
from evolver.skills import load_skills
from evolver.store import Store
from evolver.types import Episode, Step, Task
from evolver_evoskill.proposer import bump, parse_plan, slug
from evolver_evoskill.render import LADDER, Rung, fit, render_trace

TESTS = Path(__file__).resolve().parents[3] / "tests"
sys.path.insert(0, str(TESTS))
import toybench  # noqa: E402


def episode(category="twc", n_steps=12, obs="x" * 400):
    task = Task(id=f"t/{category}", benchmark="b", split="train", category=category, prompt="Put the clothes away.",
                gold=["take shirt", "open drawer", "put shirt in drawer"])
    steps = [Step(i, "p", "o", f"action {i}", obs) for i in range(n_steps)]
    return Episode(task=task, program_id="seed", program_hash="h", model="m", seed=0, steps=steps, score=0.2,
                   prediction="action 11")


def test_plan_parsing_is_lenient_but_never_invents_from_gold():
    class S:  # a stand-in for a loaded skill
        name = "check-inventory"
    plan = parse_plan("ACTION: edit\nSKILL: Check Inventory\nWHY: loops\nIDEA: look first", [S()], [episode()])
    assert plan == {"action": "edit", "skill": "check-inventory", "why": "loops", "idea": "look first"}
    plan = parse_plan("ACTION: edit\nSKILL: unknown-one\nIDEA: x", [S()], [episode()])
    assert plan["action"] == "create" and plan["skill"] == "unknown-one"  # cannot edit what does not exist
    plan = parse_plan("I think the agent should look around more.", [], [episode("cookingworld")])
    assert plan["skill"] == "cookingworld-procedure" and "look around" in plan["idea"]
    assert slug("  Hello, World!! ") == "hello-world" and bump("0.1.9") == "0.1.10" and bump("x") == "0.1.1"


def test_ladder_cuts_in_documented_order_and_says_so():
    eps = [episode() for _ in range(4)]

    def build(rung: Rung) -> str:
        return "\n\n".join(render_trace(e, rung) for e in eps[:rung.failures])
    full, cuts = fit(build, 10**6, len)
    assert cuts == [] and full.count("> action") == 48
    text, cuts = fit(build, len(build(LADDER[2])), len)
    assert cuts == [LADDER[1].note, LADDER[2].note] and "(6 earlier steps not shown)" in text
    text, cuts = fit(build, 300, len)
    assert cuts[-1].endswith("characters cut from the middle") and "characters cut ..." in text
    assert "Gold (for diagnosis only" in render_trace(eps[0], LADDER[0])


def test_merge_unions_the_distinct_skills_of_frontier_members(tmp_path):
    from evolver.proposers import Draft, ProposeContext
    from evolver.skills import write_skill
    from evolver.types import Proposal
    from evolver_evoskill.proposer import EvoSkillProposer

    plugins.load_local(Path(toybench.__file__))
    roles = {r: RoleConfig(backend="scripted", options={"rule": toybench.make_rule()}) for r in
             ("executor", "proposer", "builder", "judge")}
    cfg = Config(benchmark="upper", benchmark_options={}, store=str(tmp_path / "store"), roles=roles,
                 proposers=["evoskill"],
                 loop={"iterations": 0})
    store = Store(tmp_path / "store" / "evolver.duckdb")
    repo = ProgramRepo(tmp_path / "store")
    run = Run(cfg, store, repo)
    try:
        run_loop(run)  # the seed is on the frontier
        for cid, score, tokens in (("p0001", 0.5, 10.0), ("p0002", 0.6, 20.0)):  # a trade-off: both stay
            path = repo.new_candidate(cid, "seed")
            write_skill(path / "skills", f"rule-{cid}", "Use when asked to answer with a word.", f"1. {cid}")
            repo.commit_candidate(cid, {"id": cid, "parent": "seed", "operator": "create"}, f"create {cid}")
            assert run.frontier.consider(cid, {"score": score, "context_tokens": tokens, "cost": tokens}).admitted
        made = []

        def new_draft(operator, hypothesis="", parent_id=None, detail=None):
            path = repo.new_candidate("p0003", parent_id or "seed")
            made.append(Draft("p0003", Proposal("evoskill", operator, parent_id, hypothesis, detail or {}, "p0003"), path))
            return made[-1]
        ctx = ProposeContext(run=run, iteration=1, parent=repo.checkout("seed"), failures=[], successes=[],
                             history=[], frontier=run.frontier, n=1, new_draft=new_draft)
        EvoSkillProposer(run).propose(ctx)
        assert made[0].proposal.operator == "merge" and made[0].proposal.parent_id == "p0002"
        assert {s.name for s in load_skills(made[0].path / "skills")} == {"rule-p0001", "rule-p0002"}
        # The same union is not proposed twice.
        ctx.history = [{"detail": made[0].proposal.detail}]
        assert EvoSkillProposer(run)._merge(ctx) is None
    finally:
        run.close()
        store.close()


def _run_with_verifier(tmp_path, rule):
    plugins.load_local(Path(toybench.__file__))
    roles = {r: RoleConfig(backend="scripted", options={"rule": rule}) for r in ("executor", "proposer", "builder", "judge")}
    cfg = Config(benchmark="upper", benchmark_options={}, store=str(tmp_path / "store"), roles=roles,
                 proposers=["evoskill"],
                 plugins={"evoskill": {"verifier": True}},
                 loop={"iterations": 1, "train_per_category": 2, "candidates_per_iteration": 1})
    store = Store(tmp_path / "store" / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(tmp_path / "store"))
    try:
        summary = run_loop(run)
        return summary, store.proposals(run.id), store.episodes(run_id=run.id, purpose="verify")
    finally:
        run.close()
        store.close()


def test_surrogate_verifier_passes_a_good_skill_on_to_the_true_grader(tmp_path):
    summary, props, verify_eps = _run_with_verifier(tmp_path, toybench.make_rule())
    assert props[0]["status"] == "admitted" and props[0]["detail"]["verified"] is True
    assert props[0]["detail"]["assertions"] == ["correct", "wrong"] * 2  # one set per replayed failure
    assert verify_eps and all(e.score == 1.0 for e in verify_eps)  # replays on its own failure tasks


def test_surrogate_verifier_rejects_after_one_revision(tmp_path):
    calls = []
    base = toybench.make_rule(body="Answer with the word exactly as written.\n2. Be quick.")

    def rule(req):
        calls.append("\n".join(m.content for m in req.messages))
        limits.append((req.max_line_repeats, "## The proposal" in calls[-1]))
        return base(req)
    limits = []
    summary, props, verify_eps = _run_with_verifier(tmp_path, rule)
    assert props[0]["status"] == "rejected" and props[0]["reason"].startswith("surrogate verifier: ASSERT: correct")
    assert {n for n, builder in limits if builder} == {3}  # a looping builder reply is stopped early
    revision = [c for c in calls if "failed these checks" in c]
    assert revision, "the builder got the failed assertions back for one revision"
    verifier_prompts = [c for c in calls if c.rstrip().endswith("Assertions:")]
    assert verifier_prompts and all("Be quick" not in c and "Idea:" not in c for c in verifier_prompts)  # isolated
    assert summary["best"] == "seed"


def test_agentic_mode_queries_the_store_and_reads_files_before_answering(tmp_path):
    base = toybench.make_rule()
    seen = []

    def rule(req):
        text = "\n".join(m.content for m in req.messages)
        if "Investigate its failures with the tools" in text:
            seen.append(req.messages[-1].content)
            turn = sum(1 for m in req.messages if m.role == "assistant")
            if turn == 0:
                return "SQL SELECT task_id, score FROM episodes WHERE purpose = 'train' ORDER BY task_id"
            if turn == 1:
                return "READ prompt.md"
            return "ACTION: create\nSKILL: shout-words\nWHY: lowercase answers\nIDEA: uppercase them"
        return base(req)
    plugins.load_local(Path(toybench.__file__))
    roles = {r: RoleConfig(backend="scripted", options={"rule": rule}) for r in ("executor", "proposer", "builder", "judge")}
    cfg = Config(benchmark="upper", benchmark_options={}, store=str(tmp_path / "store"), roles=roles,
                 proposers=["evoskill"],
                 plugins={"evoskill": {"mode": "agentic"}}, loop={"iterations": 1, "candidates_per_iteration": 1})
    store = Store(tmp_path / "store" / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(tmp_path / "store"))
    try:
        run_loop(run)
        props = store.proposals(run.id)
    finally:
        run.close()
        store.close()
    assert "upper/train/0\t0.0" in seen[1]  # the SQL result came back to the proposer
    assert "You are an agent playing" in seen[2]  # so did the file it read
    assert props[0]["status"] == "admitted" and props[0]["detail"]["skill"] == "shout-words"


def test_degenerate_builder_output_is_invalid():
    from evolver_evoskill.proposer import _field_problem

    assert _field_problem("Use when cooking.", "1. Read the cookbook.\n2. Take each ingredient.", 1500) == ""
    looping = "1. The body: steps.\n" + "The body: steps.\n" * 6
    assert "repeats" in _field_problem("Use when cooking.", looping, 1500)
    echo = "1. The proposal: Use when the agent should apply the skill to the task."
    assert "echoes" in _field_problem("Use when cooking.", echo, 1500)
    assert "no numbered steps" in _field_problem("Use when cooking.", "just words here and there", 1500)


def test_an_edit_changes_its_own_worktree_never_the_parents_checkout(tmp_path):
    from evolver.proposers import Draft, ProposeContext
    from evolver.skills import write_skill
    from evolver.types import Proposal
    from evolver_evoskill.proposer import EvoSkillProposer

    plugins.load_local(Path(toybench.__file__))
    rule = toybench.make_rule(plan="ACTION: edit\nSKILL: shout-words\nWHY: too vague\nIDEA: say it louder")
    roles = {r: RoleConfig(backend="scripted", options={"rule": rule}) for r in ("executor", "proposer", "builder", "judge")}
    cfg = Config(benchmark="upper", benchmark_options={}, store=str(tmp_path / "store"), roles=roles,
                 proposers=["evoskill"], loop={"iterations": 0})
    store = Store(tmp_path / "store" / "evolver.duckdb")
    repo = ProgramRepo(tmp_path / "store")
    run = Run(cfg, store, repo)
    try:
        run_loop(run)
        path = repo.new_candidate("p0001", "seed")
        write_skill(path / "skills", "shout-words", "Use when asked to answer with a word.", "1. Be loud.",
                    meta={"version": "0.1.0"})
        repo.commit_candidate("p0001", {"id": "p0001", "parent": "seed", "operator": "create"}, "create")
        parent = repo.checkout("p0001")
        made = []

        def new_draft(operator, hypothesis="", parent_id=None, detail=None):
            made.append(Draft("p0002", Proposal("evoskill", operator, "p0001", hypothesis, detail or {}, "p0002"),
                              repo.new_candidate("p0002", "p0001")))
            return made[-1]
        ctx = ProposeContext(run=run, iteration=0, parent=parent, failures=[], successes=[], history=[],
                             frontier=run.frontier, n=1, new_draft=new_draft)
        EvoSkillProposer(run, merge=False).propose(ctx)
        assert made[0].proposal.operator == "edit" and not made[0].rejected
        edited = load_skills(made[0].path / "skills")[0]
        assert edited.meta["version"] == "0.1.1" and "UPPERCASE" in edited.body
        kept = load_skills(Path(parent.root) / "skills")
        assert [s.body.strip() for s in kept] == ["1. Be loud."]  # the parent's checkout is untouched
    finally:
        run.close()
        store.close()
