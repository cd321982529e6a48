"""The recipe-steps observer skill (hand-written, in the opt-in twx-experts pack): its script's next move
wins cookingworld."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evolver_twx import benchmark as twx_mod

needs_java = pytest.mark.skipif(shutil.which("java") is None, reason="Java not installed")
SKILL = Path(__file__).resolve().parents[1] / "evolver_twx" / "packs" / "twx-experts" / "recipe-steps"
SCRIPT = SKILL / "scripts" / "steps.py"

TASK = ("You are hungry! Let's cook a delicious meal. Check the cookbook in the kitchen for the recipe. "
        "Once done, enjoy your meal!")
ROOM = ("You are in the kitchen. In one part of the room you see a stove. There is also an oven. You also see a "
        "toaster. In another part of the room you see a fridge that is closed. In one part of the room you see "
        "a counter that has a cookbook on it. There is also a kitchen cupboard that is closed. You also see a "
        "cutlery drawer that is closed. There is also a dining chair, that has nothing on it. ")
RECIPE = ("Gather all following ingredients and follow the directions to prepare this tasty meal.\n\nIngredients:\n"
          "  pork chop\n\nDirections:\n  slice the pork chop\n  grill the pork chop\n  prepare meal\n\n\n")
# (action, what the game answered, the move the script must say next)
EPISODE = [
    ("take cookbook", "You take the cookbook.", "read cookbook"),
    ("read cookbook", RECIPE, "open cutlery drawer"),  # the knife is wanted first: slicing needs it
    ("open cutlery drawer", "You open the cutlery drawer. The cutlery drawer contains a knife.", "take knife"),
    ("take knife", "You take the knife.", "open fridge"),
    ("open fridge", "You open the fridge. The fridge contains a raw pork chop.", "take pork chop"),
    ("close fridge", "You close the fridge.", "open fridge"),  # shut in again: open it first
    ("open fridge", "You open the fridge. The fridge contains a raw pork chop.", "take pork chop"),
    ("take pork chop", "You take the pork chop.\n[Your score has gone up by 1 point.]", "slice pork chop"),
    ("slice pork chop", "You slice the pork chop.", "cook pork chop in toaster"),
    ("cook pork chop in toaster", "You grill the pork chop with the toaster.", "prepare meal"),
    ("prepare meal", "Adding the meal to your inventory.", "eat meal"),
]


def steps(transcript: str) -> str:
    """What the skill's script prints for a transcript, as the harness runs it (stdin, 5 s)."""
    res = subprocess.run([sys.executable, str(SCRIPT)], input=transcript, capture_output=True, text=True,
                         timeout=5)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def next_move(out: str) -> str | None:
    m = re.match(r"Next: (.+?)\.(?:\s|$)", out)
    return m.group(1) if m else None


def test_recipe_skill_front_matter_names_its_observer():
    text = (SKILL / "SKILL.md").read_text()
    assert "name: recipe-steps" in text and "observe: scripts/steps.py" in text
    when = re.search(r'observe_when: "(.+)"', text).group(1)
    assert re.search(when, TASK, re.I)
    for other in ("Your task is to pick up objects, then place them in their usual locations in the environment.",
                  "Your task is to do exactly what Simon says.", "Your task is to solve a math problem: add 3 and 4."):
        assert not re.search(when, other, re.I)


def test_recipe_script_follows_a_hand_written_episode():
    transcript = f"{TASK}\n\n{ROOM}\n\n{ROOM}"  # as the harness starts it: the prompt holds the room too
    assert steps(transcript) == "Next: take cookbook."
    for action, answer, expected in EPISODE:
        transcript += f"\n> {action}\n{answer}"
        out = steps(transcript)
        assert next_move(out) == expected, (action, out)
        assert len(out) <= 300  # the harness shows 300 characters of a note
    assert "Recipe left: cook pork chop in toaster, prepare meal, eat meal." in steps(
        transcript.rsplit("\n> cook pork chop", 1)[0])


def test_recipe_script_is_quiet_elsewhere():
    twc = ("Your task is to pick up objects, then place them in their usual locations in the environment.\n\n"
           "You are in the kitchen. In one part of the room you see a fridge that is closed. You also see a "
           "counter that has a dirty dish on it.\n\n> take dirty dish\nYou take the dirty dish.")
    assert steps(twc) == ""
    assert steps("") == ""


@needs_java
def test_following_the_script_wins_easy_cookingworld():
    bench = twx_mod.TwxBenchmark(suite="twx-easy", games="cookingworld")
    try:
        for split in ("train", "dev"):
            lost = []
            for task in bench.tasks(split, 20):
                env = bench.env(task)
                obs = env.reset()
                transcript = f"{task.prompt}\n\n{obs.text}"
                while not obs.done:
                    action = next_move(steps(transcript))
                    assert action, (task.id, transcript[-500:])
                    obs = env.step(action)
                    transcript += f"\n> {action}\n{obs.text}"
                if not obs.info["won"]:
                    lost.append(task.id)
                env.close()
            assert not lost, lost
    finally:
        bench.close()
