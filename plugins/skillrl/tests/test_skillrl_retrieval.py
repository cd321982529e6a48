"""Retrieval: the general tier is always in, task-specific skills need similarity above δ, top-K, the
token budget and the caller's k cap the rest; the select_skills hook puts it in the core harness."""
from skillrl_helpers import fresh_plugins, make_run  # noqa: F401
from skillrl_pathbench import PathBench

from evolver.skills import load_skills
from evolver.types import Task
from evolver_skillrl.bank import BankEntry, counts, write_entries
from evolver import load_embedder
from evolver_skillrl.retrieval import Retriever

ENTRIES = [
    BankEntry("general", "general-read-the-goal", "Use when starting any task: read the goal first.",
              "1. Read the goal.\n2. Act toward it."),
    BankEntry("task", "doors-open-then-go", "Use when a doors task asks to open a door and go north.",
              "1. open the door\n2. go north through the door\n3. take the key", "doors"),
    BankEntry("lesson", "lesson-doors-never-wait", "Use when a doors task tempts you to wait at the door.",
              "Where it failed: at the door\nWrong action: wait\nRight action: open door\nRule: doors open", "doors"),
    BankEntry("task", "boxes-coin-routine", "Use when a boxes task asks to open a box and take a coin.",
              "1. open the box\n2. take the coin\n3. close the box", "boxes"),
]


def bank(tmp_path):
    write_entries(tmp_path, ENTRIES)
    return load_skills(tmp_path / "skills")


def task(category, prompt):
    return Task(id=f"t/{category}", benchmark="paths", split="dev", category=category, prompt=prompt)


def names(found):
    return [s.name for s in found.skills]


def test_general_always_then_the_category_by_similarity(tmp_path):
    skills = bank(tmp_path)
    assert counts(skills) == {"general": 1, "task": 2, "lesson": 1}
    r = Retriever(skills, load_embedder("hashing"), top_k=2, delta=0.05, token_budget=1000)
    found = r.retrieve(task("doors", "Goal: open the door, go north and take the key."))
    assert names(found)[0] == "general-read-the-goal"
    assert set(names(found)[1:]) == {"doors-open-then-go", "lesson-doors-never-wait"}
    assert found.scores["doors-open-then-go"] > found.scores["lesson-doors-never-wait"]  # best first
    assert names(found)[1] == "doors-open-then-go"
    # boxes skills are never candidates for a doors task (S_k of its own category)
    assert "boxes-coin-routine" not in names(found) and "boxes-coin-routine" not in found.skipped


def test_delta_filters_but_never_the_general_tier(tmp_path):
    r = Retriever(bank(tmp_path), load_embedder("hashing"), top_k=3, delta=0.99, token_budget=1000)
    found = r.retrieve(task("doors", "Goal: open the door, go north and take the key."))
    assert names(found) == ["general-read-the-goal"]
    assert all("delta" in why for why in found.skipped.values()) and len(found.skipped) == 2
    # an unrelated task still gets the general tier
    assert names(r.retrieve(task("doors", "zzzz qqqq"))) == ["general-read-the-goal"]


def test_top_k_budget_and_the_callers_room(tmp_path):
    skills = bank(tmp_path)
    t = task("doors", "Goal: open the door, go north and take the key.")
    r = Retriever(skills, load_embedder("hashing"), top_k=1, delta=0.0, token_budget=1000)
    found = r.retrieve(t)
    assert names(found) == ["general-read-the-goal", "doors-open-then-go"]
    assert "top-K" in found.skipped["lesson-doors-never-wait"]
    r = Retriever(skills, load_embedder("hashing"), top_k=2, delta=0.0, token_budget=1)
    found = r.retrieve(t)
    assert names(found) == ["general-read-the-goal"] and all("budget" in w for w in found.skipped.values())
    r = Retriever(skills, load_embedder("hashing"), top_k=2, delta=0.0, token_budget=1000)
    assert names(r.retrieve(t, k=2)) == ["general-read-the-goal", "doors-open-then-go"]  # harness room 2
    assert names(r.retrieve(t, k=1)) == ["general-read-the-goal"]


def test_a_new_category_falls_back_to_the_nearest_of_any(tmp_path):
    skills = bank(tmp_path)
    r = Retriever(skills, load_embedder("hashing"), top_k=1, delta=0.05, token_budget=1000)
    found = r.retrieve(task("chests", "open the box and take the coin"))
    assert names(found) == ["general-read-the-goal", "boxes-coin-routine"]
    # a known category draws from its own skills only, unless same_category is off
    doors_task = task("doors", "open the box and take the coin")
    strict = Retriever(skills, load_embedder("hashing"), top_k=3, delta=0.05, same_category=True)
    assert "boxes-coin-routine" not in names(strict.retrieve(doors_task))
    loose = Retriever(skills, load_embedder("hashing"), top_k=3, delta=0.05, same_category=False)
    assert names(loose.retrieve(doors_task))[1] == "boxes-coin-routine"


def test_the_hook_serves_the_core_harness_only_for_banks(tmp_path):
    run = make_run(tmp_path, skillrl={"delta": 0.05, "top_k": 1})
    seed = run.repo.checkout("seed")
    t = PathBench().tasks("dev", per_category=1)[0]
    # a program without a bank: the hook defers (the core's lexical default answers)
    path = run.repo.new_candidate("plain", seed.commit)
    from evolver.skills import write_skill

    write_skill(path / "skills", "some-skill", "Use when opening doors.", "open door")
    plain = run.repo.commit_candidate("plain", {"parent": "seed", "operator": "test"}, "plain skill")
    assert [s.name for s in run.context(plain).select_skills(t, 2)] == ["some-skill"]
    # a program with a bank: general always, then the doors skill
    path = run.repo.new_candidate("banked", seed.commit)
    write_entries(path, ENTRIES)
    banked = run.repo.commit_candidate("banked", {"parent": "seed", "operator": "test"}, "bank")
    chosen = [s.name for s in run.context(banked).select_skills(t, 3)]
    assert len(chosen) == 2 and chosen[0] == "general-read-the-goal"
    assert chosen[1] in ("doors-open-then-go", "lesson-doors-never-wait")
    # the decision is logged once (a group's rollouts repeat it), with its reasons
    run.context(banked).select_skills(t, 3)
    import json

    from evolver_skillrl.retrieval_log import log_path
    rows = [json.loads(line) for line in log_path(run).read_text().splitlines()]
    mine = [r for r in rows if r["program_id"] == banked.id]
    assert len(mine) == 1 and mine[0]["task_id"] == t.id and mine[0]["chosen"] == chosen
    assert set(mine[0]["scores"]) == set(chosen[1:]) and mine[0]["room"] == 3
    assert all(r["program_id"] != plain.id for r in rows)  # the hook deferred for the plain program
    import duckdb

    assert duckdb.sql(f"SELECT count(*) FROM read_json_auto('{log_path(run)}')").fetchall()[0][0] == len(rows)
    run.config.plugins["skillrl"]["retrieval"] = "off"
    assert [s.name for s in run.context(banked).select_skills(t, 3)] != chosen
    run.close()
