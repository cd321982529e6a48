"""Distillation: the teacher's answer is schema-checked, one repair call fixes an invalid one, a second
failure drops it; only training trajectories may be distilled; the rules distiller abstracts objects."""
import json

import pytest
from skillrl_helpers import LESSON, SKILL, episode, fresh_plugins  # noqa: F401
from skillrl_pathbench import PathBench

from evolver.backends.scripted import ScriptedBackend
from evolver.types import GenResult
from evolver_skillrl import schema
from evolver_skillrl.distill import Distiller, Item, LeakError, abstract


def tasks(split="train"):
    return PathBench().tasks(split, per_category=2)


def test_schema_accepts_a_valid_answer_and_names_every_problem():
    ok, problems = schema.parse("Sure! " + json.dumps(SKILL) + " hope it helps", schema.SkillAnswer)
    assert ok is not None and problems == [] and ok.steps[0] == "Read the goal"
    bad = dict(SKILL, description="When stuck.", steps=[])
    ans, problems = schema.parse(json.dumps(bad), schema.SkillAnswer)
    assert ans is None
    assert any(p.startswith("description") and "Use when" in p for p in problems)
    assert any(p.startswith("steps") for p in problems)
    assert schema.parse("no json here", schema.LessonAnswer)[1][0].startswith("no JSON object")
    assert "invalid JSON" in schema.parse('{"name": "x",}', schema.LessonAnswer)[1][0]
    # braces inside strings do not end the object
    text = json.dumps(dict(LESSON, rule="Always check {the goal} first, then act."))
    assert schema.parse("x " + text, schema.LessonAnswer)[0].rule.startswith("Always check {the goal}")


def test_an_answer_that_copies_the_format_back_is_invalid():
    for text, model in ((schema.SKILL_FORMAT, schema.SkillAnswer), (schema.LESSON_FORMAT, schema.LessonAnswer)):
        ans, problems = schema.parse(text, model)
        assert ans is None and "placeholder" in problems[0] and "short-kebab-name" in problems[0]
    ans, problems = schema.parse(json.dumps(dict(SKILL, steps=["Read the goal", "..."])), schema.SkillAnswer)
    assert ans is None and "steps '...'" in problems[0]


def test_valid_answers_become_entries_of_the_right_tier():
    t = tasks()
    teacher = ScriptedBackend([json.dumps(SKILL), json.dumps(dict(SKILL, general=True, name="read-first")),
                               json.dumps(LESSON)])
    out = Distiller(teacher).distill([Item("skill", episode(t[0], t[0].gold, 1.0)),
                                      Item("skill", episode(t[1], t[1].gold, 1.0)),
                                      Item("lesson", episode(t[2], ["wait"], 0.0), reference=t[2].gold)])
    assert out.stats == {"asked": 3, "valid": 3, "repaired": 0, "rejected": 0}
    tiers = [(e.tier, e.category) for e in out.entries]
    assert tiers == [("task", "doors"), ("general", None), ("lesson", "boxes")]
    lesson = out.entries[2].body
    for part in ("Where it failed:", "Wrong action: wait", "Right action:", "Rule: Always"):
        assert part in lesson
    # the lesson prompt showed the reference path for diagnosis, the skill prompt did not
    assert "correct action path" in teacher.calls[2].messages[-1].content
    assert "correct action path" not in teacher.calls[0].messages[-1].content


def test_one_repair_call_shows_the_problems_and_fixes_the_answer():
    t = tasks()
    teacher = ScriptedBackend(["I think the agent should read.", json.dumps(SKILL)])
    out = Distiller(teacher).distill([Item("skill", episode(t[0], t[0].gold, 1.0))])
    assert out.stats["repaired"] == 1 and out.stats["valid"] == 1 and len(out.entries) == 1
    repair = teacher.calls[1].messages
    assert repair[-2].role == "assistant" and repair[-2].content == "I think the agent should read."
    assert "not valid" in repair[-1].content and "no JSON object" in repair[-1].content


def test_a_second_invalid_answer_is_dropped_and_counted():
    t = tasks()
    bad = json.dumps(dict(LESSON, description="whenever it is stuck"))
    teacher = ScriptedBackend([bad, bad, GenResult(text="", error="context overflow"), json.dumps(LESSON)])
    out = Distiller(teacher).distill([Item("lesson", episode(t[0], ["wait"], 0.0)),
                                      Item("lesson", episode(t[1], ["wait"], 0.0))])
    assert out.stats == {"asked": 2, "valid": 1, "repaired": 1, "rejected": 1}
    assert len(teacher.calls) == 4 and out.problems == ["doors: teacher error: context overflow"]
    assert "Use when" in teacher.calls[2].messages[-1].content  # the repair call named the schema problem
    # without repair, an invalid first answer is simply rejected
    teacher = ScriptedBackend([bad])
    out = Distiller(teacher, repair=False).distill([Item("lesson", episode(t[0], ["wait"], 0.0))])
    assert out.stats["rejected"] == 1 and len(teacher.calls) == 1


@pytest.mark.parametrize("split,purpose", [("dev", "eval"), ("test", "eval"), ("train", "eval"), ("dev", "train")])
def test_only_training_trajectories_reach_the_teacher(split, purpose):
    t = tasks(split)[0]
    teacher = ScriptedBackend([json.dumps(LESSON)])
    with pytest.raises(LeakError, match="only training trajectories"):
        Distiller(teacher).distill([Item("lesson", episode(t, ["wait"], 0.0, purpose=purpose))])
    assert teacher.calls == []


def test_rules_distiller_abstracts_objects_and_finds_the_first_wrong_step():
    assert abstract("cook red potato in stove") == "cook X in Y"
    assert abstract("take the key from the box") == "take X from Y"
    t = tasks()[0]
    out = Distiller(None).distill([Item("skill", episode(t, t.gold, 1.0)),
                                   Item("lesson", episode(t, [t.gold[0], "wait"], 0.33), reference=t.gold)])
    skill, lesson = out.entries
    assert skill.tier == "task" and "open X" in skill.body and "red" not in skill.body
    assert lesson.tier == "lesson" and "Wrong action: wait" in lesson.body and f"Right action: {t.gold[1]}" in lesson.body
