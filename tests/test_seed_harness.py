"""The seed harness's context: what a step's prompt keeps of the episode so far."""
import shutil

from evolver.harness import SEED_DIR, Action, make_harness, program_context
from evolver.types import ChoiceResult, Observation, Program, Task

ROOM = ("You are in the kitchen. In one part of the room you see a stove. There is also an oven. "
        "You also see a fridge that is closed. In one part of the room you see a counter that has a cookbook on it.")
RECIPE = ("Gather all following ingredients and follow the directions to prepare this tasty meal. "
          "Ingredients: red potato Directions: roast the red potato prepare meal")


def seed_harness(tmp_path):
    root = tmp_path / "seed"
    shutil.copytree(SEED_DIR, root)
    return make_harness(program_context(Program("seed", "c0ffee", str(root), "hseed")))


def play(harness, steps, actions=("roast red potato in oven", "look around")):
    """The user prompt of each step of an episode that took ``steps`` (action, observation) pairs."""
    task = Task("t", "b", "train", "cooking", prompt="Cook a meal.\n\n" + ROOM)
    state = harness.start(task, Observation(ROOM))
    prompts = [harness.next_call(state, Observation(ROOM, actions=list(actions))).messages[1].content]
    for action, text in steps:
        harness.observe(state, Action(env_action=action), text)
        prompts.append(harness.next_call(state, Observation(text, actions=list(actions))).messages[1].content)
    return prompts


EPISODE = [
    ("look around", ROOM), ("take cookbook", "You take the cookbook."), ("read cookbook", RECIPE),
    ("open fridge", "You open the fridge. The fridge contains a red potato."),
    ("take red potato", "You take the red potato."), ("close fridge", "You close the fridge."),
    ("look around", ROOM.replace("a cookbook", "nothing")), ("examine oven", "A hot oven."),
]


def test_an_observation_that_left_the_window_stays_as_a_note(tmp_path):
    prompt = play(seed_harness(tmp_path), EPISODE)[-1]  # 8 steps: the first 4 have folded
    assert f"Notes from earlier steps:\n- read cookbook: {RECIPE}" in prompt
    assert "- look around" not in prompt  # the room again is no news: the task text holds it
    assert "- take cookbook" not in prompt  # nor is a short confirmation
    assert "Earlier actions: look around, take cookbook, read cookbook, open fridge\n" in prompt
    assert "Recent steps:\n> take red potato\nYou take the red potato.\n> close fridge" in prompt
    assert prompt.count("A hot oven.") == 1  # the latest observation, once
    assert prompt.endswith("> examine oven\n\nObservation: A hot oven.\n\nValid actions: roast red potato in oven, "
                           "look around\n\nNext action:")


def test_each_prompt_extends_the_one_before_until_the_window_folds(tmp_path):
    prompts = play(seed_harness(tmp_path), EPISODE)
    # What the next prompt can reuse: all but the latest observation and the valid actions.
    head = [p[:p.index("\n\nObservation:" if "Observation:" in p else "\n\nValid actions:")] for p in prompts]
    folds = [n for n in range(1, len(prompts)) if not prompts[n].startswith(head[n - 1])]
    assert folds == [8]  # 4 steps in full at least, 4 leave together: once in 8 steps
    assert "Earlier actions" not in prompts[7] and prompts[7].count("\n> ") == 7
    # The first observation is the task's own text: not shown twice.
    assert prompts[0].count("You are in the kitchen.") == 1 and "Observation:" not in prompts[0]


def test_a_short_episode_has_no_notes_and_no_earlier_actions(tmp_path):
    prompt = play(seed_harness(tmp_path), [("read cookbook", RECIPE), ("take cookbook", "You take the cookbook.")])[-1]
    assert "Notes from earlier steps" not in prompt and "Earlier actions" not in prompt
    assert f"> read cookbook\n{RECIPE}\n> take cookbook\n\nObservation: You take the cookbook." in prompt


def test_an_action_taken_in_the_same_state_is_not_offered_again(tmp_path):
    h = seed_harness(tmp_path)
    state = h.start(Task("t", "b", "train", "twc", prompt="Put things away."), Observation("A corridor."))
    actions = ["take umbrella", "put umbrella in hat rack", "look around"]
    holding = Observation("You take the umbrella.", actions=actions, info={"look": "A corridor.", "inventory": "umbrella"})

    def take(request, name):
        action = h.parse(state, holding, request, ChoiceResult(index=request.options.index(name), scores=[]))
        h.observe(state, action, "ok")
        return action

    first = h.next_call(state, holding)
    assert first.options == actions
    take(first, "put umbrella in hat rack")
    # Back in the very same state (same observation, room and inventory): the loop is cut.
    again = h.next_call(state, holding)
    assert again.options == ["take umbrella", "look around"]
    assert "Valid actions: take umbrella, look around\n" in again.messages[1].content
    # The same words in another room are another state: nothing is held back there.
    elsewhere = Observation("You take the umbrella.", actions=actions, info={"look": "A hall.", "inventory": "umbrella"})
    assert h.next_call(state, elsewhere).options == actions
    # When every action was tried here, all are offered rather than none.
    take(h.next_call(state, holding), "take umbrella")
    take(h.next_call(state, holding), "look around")
    assert h.next_call(state, holding).options == actions


def test_the_state_is_the_room_and_inventory_where_reported_else_the_observation(tmp_path):
    h = seed_harness(tmp_path)
    shut = {"look": "A kitchen with a closed drawer.", "inventory": "a knife"}
    # Opening and closing the drawer again comes back to the same state, whatever the words say.
    assert h.state_key(Observation("You close the drawer.", info=shut)) == \
        h.state_key(Observation("You take the knife.", info=shut))
    assert h.state_key(Observation("x", info=shut)) != h.state_key(Observation("x", info={**shut, "inventory": ""}))
    assert h.state_key(Observation("A hall.")) == h.state_key(Observation("A hall.")) != h.state_key(Observation("A yard."))


def test_skills_with_an_observe_script_annotate_what_they_compute(tmp_path):
    from pathlib import Path

    # two skills of twx's hand-written pack (opt-in: seed_skills=twx-experts)
    pack = Path(__file__).resolve().parents[1] / "plugins" / "twx" / "evolver_twx" / "packs" / "twx-experts"
    root = tmp_path / "seed"
    shutil.copytree(SEED_DIR, root)
    for name in ("arithmetic-word-problems", "quantity-order"):
        shutil.copytree(pack / name, root / "skills" / name)
    harness = make_harness(program_context(Program("seed", "c0ffee", str(root), "hseed")))
    room = "You see a counter that has 33 papayas, 2 bananas, and 20 peaches on it. There is also a math problem."
    task = Task("t", "b", "train", "arithmetic", prompt="Your first task is to solve the math problem.\n\n" + room)
    state = harness.start(task, Observation(room))
    harness.next_call(state, Observation(room, actions=["take math problem"]))
    assert state["observed"] == {}  # no problem stated yet, nothing to sort: no note
    harness.observe(state, Action(env_action="read math problem"),
                    "Your task is to solve the following math problem: divide 22 by 11 .  Then, pick up the item.")
    prompt = harness.next_call(state, Observation("x", actions=["take 2 bananas", "take 20 peaches"])).messages[1].content
    # The script sees the whole episode: the answer, and the object in the room that carries it.
    assert "[arithmetic-word-problems] divide 22 by 11 = 2. The answer is 2. Next: take 2 bananas." in prompt
    harness.observe(state, Action(env_action="take 2 bananas"), "You take the 2 bananas.")
    prompt = harness.next_call(state, Observation("x", actions=["put 2 bananas in box"])).messages[1].content
    assert "Next: put 2 bananas in box." in prompt and prompt.count("[arithmetic-word-problems]") == 1
    task = Task("s", "b", "train", "sorting", prompt="Your task is to sort objects by quantity.\n\n"
                "A counter that has 21kg of marble, and 15kg of cedar on it. A chair that has 47g of brick on it.")
    state = harness.start(task, Observation("x"))
    harness.next_call(state, Observation("x", actions=["take 47g of brick"]))  # observers run before a call
    assert state["observed"] == {"quantity-order": "[quantity-order] Next: take 47g of brick. From smallest to "
                                                   "largest: 47g of brick, 15kg of cedar, 21kg of marble."}
    for action, text in [("take 47g of brick", "You take the 47g of brick."),
                         ("put 47g of brick in box", "You put the 47g of brick in the box.")]:
        harness.observe(state, Action(env_action=action), text)
    harness.next_call(state, Observation("x", actions=["take 15kg of cedar"]))
    assert state["observed"]["quantity-order"].startswith("[quantity-order] Next: take 15kg of cedar.")
    assert state["observed"]["quantity-order"].endswith("In the box: 47g of brick.")


def test_a_long_action_list_shows_the_actions_nearest_the_task_and_still_lets_any_be_played(tmp_path):
    h = seed_harness(tmp_path)
    task = Task("t", "b", "train", "find", prompt="Find a living thing and move it to the red box.",
                hints={"actions_tokens": 60})
    state = h.start(task, Observation("A kitchen."))
    things = [f"thing {i}" for i in range(40)]
    actions = [f"look at {t}" for t in things] + ["move frog to red box"] + [f"pick up {t}" for t in things]
    request = h.next_call(state, Observation("A kitchen.", actions=actions))
    listed = request.messages[1].content.split("Valid actions: ")[1].split("\n")[0]
    # Each command gets its share, and the action that shares the task's words is listed though 40 come first.
    assert "look at thing 0," in listed and "move frog to red box" in listed and "pick up thing 0" in listed
    assert "look at thing 39" not in listed and listed.endswith("more valid actions not listed]")
    assert h.program.count_tokens(listed.split(" [...")[0]) <= 60 * 1.2  # the budget, by the list's mean
    assert request.options == actions  # the choice still ranges over every valid action
    # Lists within the budget are shown whole, in the environment's order.
    short = h.next_call(state, Observation("A kitchen.", actions=actions[:3])).messages[1].content
    assert "Valid actions: look at thing 0, look at thing 1, look at thing 2\n" in short


def with_observer(tmp_path, name, script, actions=False):
    """A seed program with one more skill whose ``scripts/observe.py`` (``script``) observes each step."""
    root = tmp_path / "seed"
    shutil.copytree(SEED_DIR, root)
    skill = root / "skills" / name
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text(f"---\nname: {name}\ndescription: Use to see what {name} says.\nmetadata:\n"
                                    f"  observe: scripts/observe.py\n  observe_actions: {str(actions).lower()}\n"
                                    "---\nObserves.\n")
    (skill / "scripts" / "observe.py").write_text(script)
    return root


def test_an_observer_gets_as_many_valid_actions_as_one_argument_can_carry(tmp_path):
    root = with_observer(tmp_path, "counter", "import json, sys\n"
                         "print('got', len(json.loads(sys.argv[sys.argv.index('--actions') + 1])))\n", actions=True)
    harness = make_harness(program_context(Program("seed", "c0ffee", str(root), "hseed")))
    actions = [f"move the {i}th very long named object into the {i}th container" for i in range(4000)]  # ~250 KB
    state = harness.start(Task("t", "b", "train", "c", prompt="Move things."), Observation("A room."))
    harness.next_call(state, Observation("A room.", actions=actions))
    got = int(state["observed"]["counter"].split()[-1])
    assert 1000 < got < len(actions)  # the first ones, as many as fit; not none (the kernel would refuse it all)
    harness.observe(state, Action(env_action="look"), "A room.")
    harness.next_call(state, Observation("A room.", actions=actions[:5]))
    assert state["observed"]["counter"].endswith("got 5")


def test_with_follow_notes_on_the_move_a_note_names_is_the_only_choice(tmp_path):
    """FOLLOW_NOTES: an observer's "Next: X." that names a valid action becomes a choice of one (the
    evaluator answers it without the model); a note naming no valid action leaves the model its choice."""
    root = with_observer(tmp_path, "pointer", "import sys\nlast = sys.stdin.read().split('\\n> ')[-1].split('\\n')[0]\n"
                         "print('Next: open door.' if last == 'look' else 'Next: fly away.')\n")
    harness_py = root / "harness" / "harness.py"
    actions = ["look", "open door", "wait"]
    for follow in (False, True):
        harness_py.write_text(harness_py.read_text().replace(f"FOLLOW_NOTES = {not follow}", f"FOLLOW_NOTES = {follow}"))
        h = make_harness(program_context(Program("seed", "c0ffee", str(root), "hseed")))
        state = h.start(Task("t", "b", "train", "c", prompt="Leave the room."), Observation("A room."))
        first = h.next_call(state, Observation("A room.", actions=actions))
        assert first.options == actions  # "fly away" is no valid action: the model chooses
        h.observe(state, Action(env_action="look"), "A room with a door.")
        req = h.next_call(state, Observation("A room with a door.", actions=actions))
        assert "[pointer] Next: open door." in req.messages[1].content  # the context is the same either way
        assert req.options == (["open door"] if follow else actions)
