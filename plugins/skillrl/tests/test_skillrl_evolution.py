"""Recursive evolution: weak categories trigger lessons from failed TRAINING trajectories only (dev and
test episodes never reach the teacher), new entries are deduplicated against the bank, every bank
change is a commit, and `evolver run --proposer skillrl` grows the bank inside the core loop."""
import json

import pytest
from skillrl_helpers import LESSON, episode, fresh_plugins, make_run, set_backend, teacher_rule  # noqa: F401
from skillrl_pathbench import COLOURS, PathBench

from evolver.backends.scripted import ScriptedBackend
from evolver.config import RoleConfig
from evolver.skills import load_skills
from evolver.types import ChoiceRequest
from evolver_skillrl.bank import BankEntry, BankError, commit_bank, counts, load_bank, write_entries
from evolver_skillrl.distill import Distiller
from evolver import load_embedder
from evolver_skillrl.evolve import dedup, evolve, training_failures, weak_categories
from evolver_skillrl.options import load_options


def test_weak_categories_and_training_failures_only():
    assert weak_categories({"doors": 0.9, "boxes": 0.5, "keys": 0.79}, 0.8) == ["boxes", "keys"]
    bench = PathBench()
    train, dev = bench.tasks("train", 3), bench.tasks("dev", 3)
    eps = ([episode(t, ["wait"], 0.0) for t in train] + [episode(t, ["wait"], 0.0, purpose="eval") for t in dev]
           + [episode(t, ["wait"], 0.0, purpose="eval", eid=f"e{t.seed}{t.category}") for t in train]  # eval of train tasks
           + [episode(t, t.gold, 1.0, eid=f"w{t.seed}{t.category}") for t in train]  # successes
           + [episode(t, t.gold, 1.0, purpose="gold", eid=f"g{t.seed}{t.category}") for t in train])
    picked = training_failures(eps, ["boxes"], 0.8, per_category=2)
    assert len(picked) == 2
    assert all(e.task.split == "train" and e.purpose == "train" and e.score < 0.8 and e.task.category == "boxes"
               for e in picked)


def test_dedup_against_the_bank_and_within_the_new_entries(tmp_path):
    old = BankEntry("task", "doors-routine", "Use when a doors task asks to open a door.", "1. open door\n2. go north",
                    "doors")
    write_entries(tmp_path, [old])
    bank = load_skills(tmp_path / "skills")
    same = BankEntry("task", "doors-again", old.description, old.body, "doors")
    other = BankEntry("lesson", "boxes-close", "Use when a boxes task ends with the coin taken.",
                      "Where it failed: end\nWrong action: wait\nRight action: close box\nRule: close boxes", "boxes")
    twin = BankEntry("lesson", "boxes-close-2", other.description, other.body, "boxes")
    kept, dropped = dedup([same, other, twin], bank, load_embedder("hashing"), threshold=0.9)
    assert [e.name for e in kept] == ["boxes-close"]
    assert dropped[0][0] == "doors-again" and "bank skill doors-routine" in dropped[0][1]
    assert dropped[1][0] == "boxes-close-2" and "new entry boxes-close" in dropped[1][1]
    kept, dropped = dedup([same], bank, load_embedder("hashing"), threshold=1.01)  # nothing is that close
    assert kept == [same] and dropped == []
    # the same words in another category are not a duplicate: that category has no such skill yet
    elsewhere = BankEntry("task", "keys-routine", old.description, old.body, "keys")
    assert dedup([elsewhere], bank, load_embedder("hashing"), threshold=0.9)[0] == [elsewhere]


def test_evolve_distils_lessons_for_weak_categories_and_caps_them(tmp_path):
    bench = PathBench()
    train = bench.tasks("train", 4)
    eps = [episode(t, ["wait"], 0.0) for t in train]
    teacher = ScriptedBackend(rule=lambda req: json.dumps(dict(LESSON, name=f"lesson-{len(teacher.calls)}",
                                                                 rule=f"Rule number {len(teacher.calls)} is distinct "
                                                                      f"{'x' * len(teacher.calls)}")))
    opts = load_options({"embedder": "hashing", "new_per_category": 1, "dedup_threshold": 0.999})
    evo = evolve({"doors": 1.0, "boxes": 0.25}, eps, [], Distiller(teacher), load_embedder("hashing"), opts, 0.8)
    assert evo.weak == ["boxes"] and all(e.task.category == "boxes" for e in evo.used)
    assert len(evo.used) == 4 and len(teacher.calls) == 4
    assert len(evo.entries) == 1 and evo.stats["capped"] == 3 and evo.entries[0].tier == "lesson"


def test_every_bank_change_is_a_checked_commit(tmp_path):
    run = make_run(tmp_path)
    seed = run.repo.checkout("seed")
    t = PathBench().tasks("train", 1)[0]
    entry = BankEntry("task", "doors-routine", "Use when a doors task asks to open a door.", "1. open X\n2. go Y", "doors")
    program = commit_bank(run, seed, [entry], "first skill", inject=3, forbidden=[t.id], sequences=[t.gold])
    log = {r["id"]: r for r in run.repo.log()}
    assert log[program.id]["operator"] == "skillrl" and log[program.id]["parent"] == "seed"
    assert counts(load_bank(program.root)) == {"general": 0, "task": 1, "lesson": 0}
    # the default harness now has room for the general tier plus top-K bodies (the hook is capped by it)
    assert "INJECT_SKILLS = 3" in (program.root and open(f"{program.root}/harness/harness.py").read())
    assert "INJECT_SKILLS = 2" in open(f"{seed.root}/harness/harness.py").read()
    # a skill that spells out a task's gold path is refused by the core's leakage audit, and nothing is committed
    leak = BankEntry("task", "doors-copy", "Use when doing doors tasks.", "Do: " + ", then ".join(t.gold), "doors")
    before = len(run.repo.log())
    with pytest.raises(BankError, match="leaks a gold action sequence"):
        commit_bank(run, program, [leak], "leaky", sequences=[t.gold])
    assert len(run.repo.log()) == before
    run.close()


def executor_rule(req):
    """Plays 'doors' right when a skill is in its context; everything else (and without skills) waits."""
    if isinstance(req, ChoiceRequest):
        raise AssertionError("the scripted backend turns choices into generation requests")
    system, user = req.messages[0].content, req.messages[-1].content
    line = next((ln for ln in user.splitlines() if ln.startswith("Valid actions: ")), "")
    options = line.removeprefix("Valid actions: ").split(", ")
    good = [o for o in options if o not in ("look around", "wait", "inventory")]
    if "## Skill:" in system and "(doors)" in user and good:
        return good[0]
    return "wait"


def test_run_with_the_skillrl_proposer_seeds_then_evolves_from_train_failures_only(tmp_path):
    from evolver.loop import run_loop

    roles = {"judge": RoleConfig(backend="scripted", options={"role": "teacher"})}
    run = make_run(tmp_path, roles=roles, skillrl={"teacher": "judge", "gold_per_category": 2, "top_k": 1},
                   # 4 dev tasks per category: the bank wins one category of two, 4 tasks of 8, which the
                   # paired admission gate accepts (2 of 4 could be luck)
                   loop={"iterations": 2, "train_per_category": 2, "dev_per_category": 4, "test_per_category": 1,
                         "candidates_per_iteration": 1, "staged": False, "sandbox_harness": False, "selector": "best",
                         "patience": 5})
    executor, teacher = ScriptedBackend(rule=executor_rule), ScriptedBackend(rule=teacher_rule)
    set_backend(run, "executor", executor)
    set_backend(run, "judge", teacher)
    summary = run_loop(run)
    proposals = run.store.proposals(run.id)
    ops = [p["operator"] for p in proposals]
    assert ops == ["seed-bank", "evolve-bank"], proposals
    seeded, evolved = proposals
    print({p["operator"]: (p["status"], p["scores"]) for p in proposals})
    assert seeded["status"] == "admitted"
    detail = evolved["detail"] if isinstance(evolved["detail"], dict) else json.loads(evolved["detail"])
    assert detail["stats"]["weak"] == ["boxes"] and detail["bank_after"]["lesson"] >= 1
    assert detail["bank_before"]["lesson"] == 0
    # the teacher saw training trajectories only: no dev or test words in any of its prompts
    dev_test_words = COLOURS["dev"] + COLOURS["test"]
    assert teacher.calls and not any(w in m.content for c in teacher.calls for m in c.messages for w in dev_test_words)
    # ... although failed dev episodes were in the store all along
    dev_failures = run.store.episodes(run_id=run.id, split="dev", max_score=0.5)
    assert dev_failures
    # skills were in the executor's context once the bank existed, and the bank lives in git
    best = run.repo.checkout(summary["best"])
    assert counts(load_bank(best.root))["general"] == 1
    run.close()


def test_cli_seeds_a_bank_and_shows_it(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from evolver import plugins
    from evolver.cli import cli
    from skillrl_helpers import HERE

    from evolver_skillrl.cli import skillrl_group

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVOLVER_PLUGINS", "skillrl")
    monkeypatch.setitem(cli.commands, "skillrl", skillrl_group)  # the CLI added plugin commands at its import
    plugins.reset()
    args = ["--plugin", str(HERE / "skillrl_pathbench.py"), "--store", str(tmp_path / "store"),
            "--set=benchmark=paths", "--set=benchmark_options={}", "--set=plugins.skillrl.teacher=rules",
            "--set=plugins.skillrl.embedder=hashing", "--set=plugins.skillrl.gold_per_category=1"]
    r = CliRunner().invoke(cli, args + ["skillrl", "seed"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    program = r.output.split("seeded program ")[1].split()[0]
    r = CliRunner().invoke(cli, args + ["skillrl", "bank", "--program", program], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "'general': 1, 'task': 2, 'lesson': 0" in r.output and "doors-procedure" in r.output
    assert "seed-bank" in r.output  # the growth table
    r = CliRunner().invoke(cli, args + ["skillrl", "seed", "--program", program])
    assert r.exit_code != 0 and "already has a bank" in r.output
