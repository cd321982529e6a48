"""Degenerate skill bodies (real outputs of a 135M model among them) are rejected at the cheap checks,
with a reason naming the skill, the rule and the offending text; realistic short skills pass."""
from pathlib import Path

import pytest

from evolver.checks import check_skill_files
from evolver.skill_quality import content_problems
from evolver.skills import parse_skill, write_skill

LOOPING = ("The skill is to read and follow the instructions book found in the environment. "
           "Repeat this until the game is completed.")
TASK = ("You are hungry! Let's cook a delicious meal. Check the cookbook in the kitchen for the recipe. "
        "Once done, enjoy your meal!\n\n-= Kitchen =-\nYou find yourself in a kitchen. A normal one. You can see "
        "a closed fridge, which looks conventional, right there by you. You see a counter. On the counter you "
        "make out a red potato and a knife.")


def problems(body, description="Use when a task needs a sum or a product.", name="arithmetic-procedure", **kw):
    return content_problems(name, description, body, **kw)


@pytest.mark.parametrize("body", ["\n".join([LOOPING] * 11), " ".join([LOOPING] * 11)],
                         ids=["one-per-line", "all-on-one-line"])
def test_a_sentence_repeated_eleven_times_is_rejected(body):
    found = problems(body)
    assert found and found[0].startswith("skill 'arithmetic-procedure': the body repeats the sentence "
                                         '"The skill is to read')
    assert "11 times" in found[0] and "say each thing once" in found[0]


def test_numbered_steps_that_only_repeat_their_number_are_rejected():
    found = problems("\n".join(f"{i}. {i}." for i in range(1, 18)), name="cooking-steps")
    assert found[0].startswith("skill 'cooking-steps': the body has list items with no instruction: "
                               '"1. 1.", "2. 2.", "3. 3.", ... (17 of 17 items)')


@pytest.mark.parametrize("body", ["1. Check the map.\n2.\n3. Go north.", "Step 1: Look around.\nStep 2:\n",
                                  "1. Open the door.\n2. ...\n3. Take the key.", "- Read the goal.\n- <step two>",
                                  "1. Look.\n2. Step 2:"])
def test_placeholder_items_are_rejected(body):
    assert "list items with no instruction" in problems(body)[0]


def test_a_short_sentence_repeated_to_fill_the_body_is_rejected():
    found = problems("1. Look around.\n2. Look around.\n3. Look around.\n4. Look around.")
    assert "repeats itself: 3 of its 4 sentences" in found[0] and '"Look around."' in found[0]


def test_a_body_that_is_the_description_is_rejected():
    description = "Use when the task asks for the total cost of several items with a discount."
    found = problems(description, description=description)
    assert "the body copies the description" in found[0] and '"Use when the task asks' in found[0]
    most = problems(f"{description}\n1. Add them.", description=description)
    assert most and "copies the description" in most[0]


def test_a_body_copying_a_task_text_is_rejected_only_when_task_texts_are_given():
    body = ("1. Read this: you find yourself in a kitchen. A normal one. You can see a closed fridge, "
            "which looks conventional.\n2. Open the fridge and take what the recipe needs.")
    found = problems(body, task_texts=["Answer with the word: apple", TASK])
    assert found and "copies 18 words of a task's text verbatim" in found[0] and '"you find yourself' in found[0]
    assert problems(body) == []
    # The boilerplate of a task may be quoted: "check the cookbook in the kitchen for the recipe" is 9 words.
    quote = "1. Check the cookbook in the kitchen for the recipe.\n2. Take each ingredient it lists, then cook."
    assert problems(quote, task_texts=[TASK]) == []


def test_a_body_with_nothing_to_say_is_rejected():
    found = problems("1. Follow the instructions.\n2. Do it carefully.")
    assert found == ["skill 'arithmetic-procedure': the body has almost nothing to say (\"1. Follow the "
                     "instructions. 2. Do it ...\": 0 distinct content words); a skill body must give concrete steps"]


GOOD = [
    ("Use when a task asks for a number computed from several values.",
     "1. Write down every number the task gives, with its unit.\n2. Decide the operations before computing.\n"
     "3. Compute step by step; keep intermediate results.\n4. Check the result has the unit the question asks for.\n"
     "5. Answer with the number only."),
    ("Use when arithmetic must be exact.",
     "Do not compute in your head. Run `python scripts/calc.py \"<expression>\"` and answer with what it "
     "prints.\n```\npython scripts/calc.py \"12 * (3 + 4)\"\n84\n```\n"
     "If it prints an error, fix the expression and run it again."),
    ("Use when entering a room you have not seen.",
     "# Explore first\n- Look around before acting.\n"
     "- Open closed containers (fridge, drawer) and read what is inside.\n- Take only what the goal needs."),
    ("Use when asked to answer with a word.", "Answer with the word in UPPERCASE letters."),
    ("Use when asked to answer with a word.", "Keep every answer short and plain."),  # tests/test_loop.py's worse-but-valid skill
    ("Use when a doors task asks to open a door.", "1. open X\n2. go Y\n3. open X\n4. take Z"),  # a SkillRL pattern
    ("Use when a boxes task ends with the coin taken.",
     "Where it failed: end\nWrong action: wait\nRight action: close box\nRule: close boxes"),  # a SkillRL lesson
]


@pytest.mark.parametrize("description,body", GOOD, ids=[g[1][:20] for g in GOOD])
def test_realistic_short_skills_pass(description, body):
    assert problems(body, description=description, task_texts=[TASK, "Answer with the word: apple"]) == []


def test_the_shipped_skills_pass():
    for folder in (Path(__file__).parents[1] / "skills").iterdir():
        if (folder / "SKILL.md").exists():
            skill = parse_skill(folder)
            assert content_problems(skill.name, skill.description, skill.body) == [], skill.name


def test_check_skill_files_rejects_a_degenerate_skill_but_not_the_parents_old_one(tmp_path):
    parent, child = tmp_path / "parent", tmp_path / "child"
    for root in (parent, child):
        write_skill(root / "skills", "explore-first", GOOD[2][0], GOOD[2][1])
        write_skill(root / "skills", "old-and-thin", "Use when stuck.", "1. Follow the instructions.")
    assert check_skill_files(parent).startswith("degenerate skill 'old-and-thin'")  # judged alone: it fails
    assert check_skill_files(child, parent_root=parent) == ""  # unchanged from the parent: not held against it
    write_skill(child / "skills", "arithmetic-procedure", "Use when a task needs a sum.", "\n".join([LOOPING] * 11))
    reason = check_skill_files(child, parent_root=parent)
    assert reason.startswith("degenerate skill 'arithmetic-procedure': the body repeats the sentence")
    assert "old-and-thin" not in reason
    write_skill(child / "skills", "arithmetic-procedure", "Use when a task needs a sum.", "1. Read: " + TASK)
    assert "of a task's text verbatim" in check_skill_files(child, task_texts=[TASK], parent_root=parent)
    (child / "skills" / "broken").mkdir()
    (child / "skills" / "broken" / "SKILL.md").write_text("no front matter")
    assert check_skill_files(child, parent_root=parent).startswith("malformed skill")  # schema first


def test_a_body_stitched_from_pieces_of_a_task_is_rejected():
    body = ("1. Check the cookbook in the kitchen for the recipe.\n2. You can see a closed fridge, "
            "which looks conventional.\n3. Cook.")
    assert "mostly the tasks' text copied (18 of its 19 words)" in problems(body, task_texts=[TASK])[0]


def test_evoskill_repairs_a_degenerate_body_instead_of_submitting_it():
    proposer = pytest.importorskip("evolver_evoskill.proposer")
    plan = {"action": "create", "skill": "arithmetic-procedure", "why": "sums were wrong", "idea": "compute carefully",
            "task_texts": ["What is 12 + 7 * 3? Give a whole number."]}
    build = proposer.EvoSkillProposer(run=None)._build_fields("(meta skill)", plan, 0)
    build.send(None)  # asks for the description
    build.send("Use when a task needs a sum or a product.")  # then asks for the body
    repair = build.send(" ".join([LOOPING] * 11))
    assert 'the body repeats the sentence "The skill is to read' in repair.messages[0].content
    with pytest.raises(StopIteration) as done:
        build.send("Write down every number.\n2. Compute with scripts/calc.py, never in your head.")
    assert done.value.value["body"].startswith("1. Write down every number.")
