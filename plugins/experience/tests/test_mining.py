"""The skill miner: cases from rewards and won episodes, an observe script that names the next move
from the nearest ones, and a proposer that writes the skill and teaches the policy its notes."""
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from doorbench import DoorBench, DoorEnv
from doorruns import door_run, fake_run, played
from evolver import Episode, Step, Task
from evolver_experience import miner, mining
from evolver_experience.miner import SkillMinerProposer
from evolver_experience.notes import observe


def transcript_and_actions(bench, task, actions):
    """The episode so far as the seed harness hands it to an observer, and the valid actions now."""
    env = bench.env(task)
    obs = env.reset()
    text = f"{task.prompt}\n\n{obs.text}"
    for a in actions:
        obs = env.step(a)
        text += f"\n> {a}\n{obs.text}"
    return text, obs.actions


def skill_from(tmp_path, episodes):
    info = mining.write_mined_skill(tmp_path / "skills", "mined-moves",
                                    mining.merge(mining.mine(episodes, DoorBench())),
                                    len(episodes), sum(e.won for e in episodes))
    return tmp_path / "skills" / "mined-moves", info


def next_move(note: str) -> str | None:
    for line in note.splitlines():
        if line.startswith("Next: "):
            return line[len("Next: "):].rstrip(".")
    return None


def test_the_miner_recovers_the_right_moves_of_a_benchmark_whose_answers_are_known(tmp_path):
    bench = DoorBench()
    demos = mining.demonstrated(bench, bench.tasks("train", 6))
    assert len(demos) == 6 and all(e.won for e in demos)
    folder, info = skill_from(tmp_path, demos)
    assert 12 <= info["cases"] <= 18 and info["dropped"] == 0  # 3 moves each; exact repeats fold
    data = observe.load(folder / mining.DATA_FILE)
    right = total = 0
    for task in bench.tasks("dev", 8):  # colours in combinations no demonstration showed
        env = DoorEnv = bench.env(task)
        done = []
        for sign in DoorEnv.signs:
            text, actions = transcript_and_actions(bench, task, done)
            move = next_move(observe.note(text, actions, data))
            right += move == f"open {sign[0]} door"
            total += 1
            done.append(f"open {sign[0]} door")
        del env
    assert right == total, f"{right} of {total} moves named right"


def test_random_play_of_training_tasks_teaches_the_right_moves_from_rewards_alone(tmp_path):
    """No demonstration, no model: valid actions picked at random, and what raised or lowered the score."""
    bench = DoorBench(demos=False)
    eps = mining.explored(bench, bench.tasks("train", 40), seed=0)
    assert len(eps) == 40 and all(e.model == "random" and e.steps for e in eps)
    assert 0 < sum(e.won for e in eps) < 40  # a few lucky games, many lost
    assert mining.explored(bench, bench.tasks("train", 40), seed=0)[7].steps == eps[7].steps  # seeded
    folder, _ = skill_from(tmp_path, eps)
    data = observe.load(folder / mining.DATA_FILE)
    right = total = 0
    for task in bench.tasks("dev", 8):
        signs = DoorBench().env(task).signs
        text, actions = transcript_and_actions(bench, task, [])
        right += next_move(observe.note(text, actions, data)) == f"open {signs[0][0]} door"
        total += 1
    assert right >= total - 1, f"{right} of {total} first moves named right"


def test_a_sweep_guided_by_the_notes_found_so_far_wins_games_random_play_rarely_wins():
    """Rewards alone: the second sweep over the same training tasks follows what the first one mined."""
    bench = DoorBench(demos=False)
    tasks = bench.tasks("train", 40)
    eps = mining.explored_sweeps(bench, tasks, 2, seed=0, epsilon=0.3)
    first, second = eps[:40], eps[40:]
    assert {e.model for e in first} == {"random"} and {e.model for e in second} == {"guided"}
    assert sum(e.won for e in second) >= sum(e.won for e in first) + 10, \
        (sum(e.won for e in first), sum(e.won for e in second))
    # guided by a parent's cases, the first sweep already follows them
    again = mining.explored_sweeps(bench, tasks, 1, seed=1, guide=mining.mine(second, bench))
    assert {e.model for e in again} == {"guided"} and sum(e.won for e in again) >= 10


def test_a_move_that_lowered_the_score_is_named_to_avoid(tmp_path):
    bench = DoorBench(demos=False)
    task = bench.tasks("train", 1)[0]
    signs = bench.env(task).signs
    wrong = f"open {signs[0][1]} door"
    folder, _ = skill_from(tmp_path, [played(bench, task, [wrong])])
    data = observe.load(folder / mining.DATA_FILE)
    text, actions = transcript_and_actions(bench, task, [])
    note = observe.note(text, actions, data)
    assert "Avoid: " in note and wrong in note and next_move(note) is None


def test_a_state_that_matches_nothing_yields_no_note(tmp_path):
    bench = DoorBench()
    folder, _ = skill_from(tmp_path, mining.demonstrated(bench, bench.tasks("train", 4)))
    data = observe.load(folder / mining.DATA_FILE)
    alien = "Bake a cake for the queen.\n\nThe kitchen is warm; flour and eggs lie on the table."
    assert observe.note(alien, ["take flour", "break eggs"], data) == ""


def data_of(cases):
    """Observe's loaded data of ``cases`` (as ``observe.load`` builds it from the skill's file)."""
    data = mining.encode(cases)
    data["bags"] = [observe.bag(t) for t in data["texts"]]
    data["norms"] = [observe.norm(b) for b in data["bags"]]
    return data


def case(task, obs, prev, action, value, earlier=""):
    state = (task, obs, prev, earlier)
    return mining.Case(observe.task_text(task), obs, prev, action, value, observe.codes(action, state),
                       observe.memory(task, earlier))


def test_what_the_episode_read_earlier_tells_two_alike_states_apart():
    task = "Cook the dish the recipe in the book asks for. There are an oven and a stove."
    # the same latest observation and last action; only the recipe read before differs
    cases = [case(task, "You take the onion.", "take onion", "cook onion in oven", 1.0, "Recipe: roast the onion."),
             case(task, "You take the onion.", "take onion", "cook onion in stove", 1.0, "Recipe: fry the onion.")]
    data = data_of(cases)
    actions = ["cook pepper in stove", "cook pepper in oven"]
    for verb, where in (("roast", "oven"), ("fry", "stove")):
        text = f"{task}\n\nA kitchen.\n> read book\nRecipe: {verb} the pepper.\n> take pepper\nYou take the pepper."
        assert observe.memory(task, observe.parse(text)[3]).split() == [verb, "pepper"]
        assert next_move(observe.note(text, actions, data)) == f"cook pepper in {where}"
    # a skill mined before cases held their memory still reads (and ties, as it did)
    old = mining.encode(cases)
    old["cases"] = [row[:6] for row in old["cases"]]
    assert [c.memory for c in mining.decode(old)] == ["", ""]


def test_one_state_that_matches_exactly_outvotes_many_that_share_only_the_task():
    task = "Cook a meal from the recipe in the kitchen."
    exact = case(task, "The meal is ready.", "prepare meal", "eat meal", 1.0)
    # a dozen other states of the same task, each of them voting half a point for closing the fridge
    crowd = [case(task, f"The meal is ready, item {i}.", f"prepare dish {i}", "close fridge", 0.5)
             for i in range(12)]
    data = data_of([exact] + crowd)
    text = f"{task}\n\nYou are in the kitchen.\n> prepare meal\nThe meal is ready."
    near = observe.neighbours(data, observe.parse(text))
    assert len(near) > 6  # the crowd is near enough to count
    assert next_move(observe.note(text, ["close fridge", "eat meal"], data)) == "eat meal"


def test_states_told_in_numbers_alone_are_told_apart_by_their_numbers():
    task = "Play one hand of cards: hit or stick."
    # the same words, other numbers: hit on a low hand, stick on a high one
    cases = [case(task, f"({hand}, 10, 0)", "hit", move, value)
             for hand, move, value in ((12, "hit", 1.0), (12, "stick", -1.0), (20, "stick", 1.0), (20, "hit", -1.0))]
    data = data_of(cases)
    for hand, move in ((12, "hit"), (20, "stick")):
        text = f"{task}\n\nDealt.\n> hit\n({hand}, 10, 0)"
        assert next_move(observe.note(text, ["hit", "stick"], data)) == move, hand
    # every number still counts as "#" too: a hand seen in no case is still the same kind of state
    assert observe.neighbours(data, observe.parse(f"{task}\n\nDealt.\n> hit\n(17, 9, 1)"))
    assert observe.bag("(20, 10, 0)") == {"#": 3, "#20": 0.5, "#10": 0.5, "#0": 0.5}


def test_a_word_only_an_earlier_observation_holds_is_part_of_the_move():
    task = "Prepare the dish the recipe in the book asks for."
    text = (f"{task}\n\nA kitchen.\n> read book\nRecipe: slice the pepper.\n> take pepper\n"
            "You take the pepper.")
    state = observe.parse(text)
    assert state[3].strip() == "Recipe: slice the pepper."
    assert observe.codes("slice pepper", state) == "e ope"
    # what a case read earlier tells its moves apart: the recipe said "slice", so slicing is the move
    cases = [case(task, "You take the onion.", "take onion", "slice onion", 1.0, "Recipe: slice the onion."),
             case(task, "You take the onion.", "take onion", "fry onion", -1.0, "Recipe: slice the onion.")]
    note = observe.note(text, ["fry pepper", "slice pepper"], data_of(cases))
    assert next_move(note) == "slice pepper" and "Avoid: fry pepper." in note


def test_which_of_the_rooms_containers_a_move_named_is_what_it_teaches():
    task = "Put things where they belong. Here are a chest of drawers, a bed and a dressing table."
    seen = case(task, "You take the shirt.", "take shirt", "put shirt in chest of drawers", 1.0)
    assert observe.template(seen.action, seen.codes) == ["put", "{o}", "in", "chest", "of", "drawers"]
    text = f"{task}\n\nA bedroom.\n> take jumper\nYou take the jumper."
    actions = ["put jumper in bed", "put jumper in dressing table", "put jumper in chest of drawers"]
    data, state = data_of([seen]), observe.parse(text)
    ranked = observe.rank(data, observe.neighbours(data, state), state, actions)
    assert ranked[0] == (pytest.approx(1.0, abs=2e-3), "put jumper in chest of drawers")  # + the tie breaker
    assert [v for v, _ in ranked[1:]] == [0.0, 0.0]


def test_a_number_computed_from_the_observation_is_the_move_not_the_number_itself():
    task = "Solve the problem, then take the pile with that many stones."
    room = "Piles of 3, 5, 8, 12, 15 and 40 stones."
    # two solved problems: the pile taken holds the sum of the two numbers read
    cases = [case(f"{task} {room}", f"Problem: {a} plus {b}.", "read problem", f"take {a + b} stones", 1.0)
             for a, b in ((1, 2), (4, 4))]
    state = observe.parse(f"{task} {room}\n\nA yard.\n> read problem\nProblem: 7 plus 5.")
    assert "\ue001" in observe.codes("take 12 stones", state)  # 7 + 5: the numbers' first and second
    assert observe.codes("take 40 stones", state) == "t t t"  # 40 is only listed (as are the words)
    actions = ["take 3 stones", "take 8 stones", "take 12 stones", "take 40 stones"]
    # 3 was a case's own answer (1 + 2), 8 one of its numbers' sum by chance: neither is computed as 12 is
    assert next_move(observe.note(state_text := f"{task} {room}\n\nA yard.\n> read problem\nProblem: 7 plus 5.",
                                  actions, data_of(cases))) == "take 12 stones"
    # a number the case computed and this state does not is no evidence for it
    assert observe.alike("take 8 stones", observe.codes("take 8 stones", observe.parse(state_text)),
                         cases[1].action, cases[1].codes) < observe.MIN_ACTION_MATCH


def test_among_equally_alike_moves_the_one_with_a_cases_own_words_goes_first():
    task = "Put the fruit in the box. There are a bench, a box and a shelf."
    seen = case(task, "You take the pear.", "take pear", "put pear in box", 1.0)
    text = f"{task}\n\nA yard.\n> take plum\nYou take the plum."
    actions = ["put plum in bench", "put plum in box", "put plum in shelf"]
    data, state = data_of([seen]), observe.parse(text)
    ranked = observe.rank(data, observe.neighbours(data, state), state, actions)
    assert ranked[0][1] == "put plum in box" and ranked[0][0] > ranked[1][0]


def test_the_observe_script_runs_alone_on_stdin_with_the_valid_actions(tmp_path):
    bench = DoorBench()
    folder, _ = skill_from(tmp_path, mining.demonstrated(bench, bench.tasks("train", 6)))
    task = bench.tasks("test", 1)[0]
    text, actions = transcript_and_actions(bench, task, [])
    res = subprocess.run([sys.executable, str(folder / "scripts" / "observe.py"), "--actions", json.dumps(actions)],
                         input=text, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert next_move(res.stdout) == f"open {bench.env(task).signs[0][0]} door"
    # the skill parses as a skill the seed harness runs as an observer with the valid actions
    from evolver.skills import parse_skill
    meta = parse_skill(folder).meta["metadata"]
    assert meta["observe"] == "scripts/observe.py" and meta["observe_actions"] is True


def test_only_training_episodes_are_mined_and_repeats_fold():
    bench = DoorBench()
    dev = played(bench, bench.tasks("dev", 1)[0], ["look around"])
    with pytest.raises(ValueError, match="training episodes only"):
        mining.mine([dev])
    demos = mining.demonstrated(bench, bench.tasks("train", 2))
    assert mining.demonstrated(bench, bench.tasks("dev", 2)) == []  # no demonstrations of dev tasks
    once, twice = mining.merge(mining.mine(demos)), mining.merge(mining.mine(demos + demos))
    assert once == twice


def test_won_steps_count_less_the_further_they_are_from_a_reward():
    task = Task(id="t/train/0", benchmark="t", split="train", category="c", prompt="Do it.")
    ep = Episode(task=task, program_id="p", program_hash="h", model="m", seed=0, won=True, score=1.0)
    for i, (a, r) in enumerate([("detour", 0.0), ("open box", 0.0), ("take key", 1.0)]):
        ep.steps.append(Step(index=i, prompt="", output=a, action=a, observation=f"after {a}", reward=r))
    values = {c.action: c.value for c in mining.episode_cases(ep)}
    assert values == {"detour": 0.25, "open box": 0.5, "take key": 1.0}


def test_the_data_is_cut_to_fit_the_skill_caps_keeping_rewarded_steps_first():
    task = Task(id="t/train/0", benchmark="t", split="train", category="c", prompt="Do it.")
    cases = [mining.Case(f"task {i}", f"observation number {i} " * 20, f"prev {i}", f"act {i}",
                         1.0 if i % 2 else 0.5, "--") for i in range(3000)]
    blob, kept = mining.packed(cases, limit=20_000)
    assert len(blob) <= 20_000 and 0 < len(kept) < len(cases)
    assert all(c.value == 1.0 for c in kept) or all(c.value == 1.0 for c in cases if c in kept[:1])
    assert sum(c.value == 1.0 for c in kept) >= sum(c.value == 0.5 for c in kept)
    del task


def test_a_store_with_no_rewards_gives_nothing_to_mine_and_no_candidate(tmp_path):
    bench = DoorBench(demos=False)
    task = bench.tasks("train", 1)[0]
    flat = played(bench, task, ["look around"] * bench.max_steps)  # no reward changed, not won
    run, logged = fake_run(bench, [flat])
    drafts = []
    ctx = SimpleNamespace(iteration=0, parent=SimpleNamespace(id="seed", root=str(tmp_path), manifest={}),
                          frontier=None,
                          new_draft=lambda *a, **k: drafts.append(a) or None)
    assert SkillMinerProposer(run, train="none", explore_per_category=0).propose(ctx) == []
    assert drafts == [] and any("nothing to mine" in line for line in logged), logged


@pytest.mark.parametrize("n,trained,expect", [(1, False, 1), (3, False, 1), (1, True, 1), (2, True, 2), (3, True, 3)])
def test_the_miners_candidate_follows_its_notes_and_a_trained_one_gets_following_twins(tmp_path, monkeypatch, n,
                                                                                      trained, expect):
    """Untrained (the default): one candidate, whose harness plays the notes' moves. Trained, given room:
    the trained candidate, its twin that follows the notes (same weights) and, room for three, the notes
    followed with the parent's weights, in case training did harm."""
    import shutil

    from evolver.harness import SEED_DIR
    bench = DoorBench(demos=False)
    won = mining.demonstrated(DoorBench(), bench.tasks("train", 2))
    run, logged = fake_run(bench, won)
    parent_root = tmp_path / "parent"
    shutil.copytree(SEED_DIR, parent_root)
    drafts = []

    def new_draft(operator, hypothesis="", detail=None):
        path = tmp_path / f"draft{len(list(tmp_path.glob('draft*')))}"
        shutil.copytree(parent_root, path)
        drafts.append(SimpleNamespace(path=str(path), manifest={}, hypothesis=hypothesis, detail=detail))
        return drafts[-1]
    ctx = SimpleNamespace(iteration=0, parent=SimpleNamespace(id="seed", root=str(parent_root), manifest={}),
                          frontier=None, n=n, new_draft=new_draft)
    train = "imitation" if trained else "none"
    if trained:
        summary = {"checkpoint": "checkpoints/x", "losses": [1.0, 0.5], "samples": 4, "trajectories": 2, "steps": 2,
                   "train_run": "r-mine-skill-it0", "from": "the configured executor model"}
        monkeypatch.setattr(SkillMinerProposer, "imitate", lambda self, ctx, program, tasks: summary)
        monkeypatch.setattr(miner, "plan_demos", lambda *a: {})  # no demonstrations to plan: imitate is stubbed
    out = SkillMinerProposer(run, train=train, demos_per_category=0).propose(ctx)
    assert len(out) == expect and out == drafts
    harness = [(Path(d.path) / "harness" / "harness.py").read_text() for d in out]
    followers = out[1:] if trained else out
    if trained:
        assert "FOLLOW_NOTES = False" in harness[0] and not out[0].detail.get("follow_notes")
    assert all("FOLLOW_NOTES = True" in h and "FOLLOW_NOTES = False" not in h
               for h in harness[len(out) - len(followers):])
    assert all(d.detail["follow_notes"] and "FOLLOW_NOTES" in d.hypothesis for d in followers)
    assert all((Path(d.path) / "skills" / "mined-moves" / mining.DATA_FILE).is_file() for d in out)
    weights = [d.manifest.get("model") for d in out]
    assert weights == (["checkpoints/x", "checkpoints/x", None][:expect] if trained else [None])
    if expect == 3:
        assert "parent's policy" in out[2].hypothesis and "checkpoint" not in out[2].detail
    if not trained:  # a parent that already follows its notes: the grown skill, nothing to switch
        (parent_root / "harness" / "harness.py").write_text(harness[0])
        drafts.clear()
        again = SkillMinerProposer(run, train="none", demos_per_category=0).propose(ctx)
        assert len(again) == 1 and not again[0].detail.get("follow_notes")


def test_a_parent_expanded_again_is_mined_from_another_slice_of_training_tasks(tmp_path, monkeypatch):
    """The run's second mining round takes the next slice of demonstrations even when it expands the
    same parent (the first round's child was not admitted): not the same candidate twice."""
    import shutil

    from evolver.harness import SEED_DIR
    bench = DoorBench(demos=False)
    won = mining.demonstrated(DoorBench(), bench.tasks("train", 2))
    run, _ = fake_run(bench, [])
    parent_root = tmp_path / "parent"
    shutil.copytree(SEED_DIR, parent_root)
    slices = []
    monkeypatch.setattr(SkillMinerProposer, "demonstrations", lambda self, k: slices.append(k) or won)

    def new_draft(operator, hypothesis="", detail=None):
        path = tmp_path / f"draft{len(list(tmp_path.glob('draft*')))}"
        shutil.copytree(parent_root, path)
        return SimpleNamespace(path=str(path), manifest={}, hypothesis=hypothesis, detail=detail)
    ctx = SimpleNamespace(iteration=0, parent=SimpleNamespace(id="seed", root=str(parent_root), manifest={}),
                          frontier=None, n=1, new_draft=new_draft, history=[])
    proposer = SkillMinerProposer(run, train="none")
    assert len(proposer.propose(ctx)) == 1
    ctx.iteration = 1  # the same parent again; iteration 0's proposal (and a twin) in the history
    ctx.history = [{"iteration": 0, "operator": miner.OPERATOR}, {"iteration": 0, "operator": miner.OPERATOR},
                   {"iteration": 0, "operator": "grpo"}]
    assert len(proposer.propose(ctx)) == 1
    assert slices == [0, 1]


@pytest.mark.parametrize("demos", [True, False], ids=["imitation", "rewards-alone"])
def test_the_proposer_writes_a_growing_skill_whose_notes_reach_the_policy_and_trains_it(tmp_path, tiny_dir, monkeypatch,
                                                                                          demos):
    """The whole path in a real run: mined from demonstrations and imitated with its notes in the prompts,
    or (rewards alone) mined from the policy's own practice rollouts and trained on the best of them
    re-rendered with the notes; gated by the loop; the candidate's dev prompts carry the observer's notes
    (run sandboxed, with the valid actions)."""
    from click.testing import CliRunner

    from evolver.cli import cli
    from evolver.run import LOOP_RUN_ID
    from evolver.store import Store

    args = [*door_run(tmp_path, tiny_dir, monkeypatch, "transformers,grpo,skillrl,experience"),
            "--set=roles.executor.options={dtype = \"fp32\"}",
            "run", "--iterations", "1", "--proposer", "skill-miner", "--set=loop.candidates_per_iteration=1",
            "--set=loop.dev_per_category=3", "--set=loop.test_per_category=2", "--set=loop.staged=false",
            "--set=loop.train_per_category=1", "--set=loop.failure_threshold=1.01", "--set=loop.best_of_n=false",
            "--set=plugins.skill-miner={train = \"auto\", demos_per_category = 4, per_category = 2, lr = 0.01, batch_size = 2, autocast = false, "
            "expert = {tasks_per_category = 3, samples = 2, wide_below = 0.0, temperature = 1.5, min_score = 0.0, "
            "min_trajectories = 1, lr = 0.01, batch_size = 2, autocast = false}}",
            f"--set=demonstrations={str(demos).lower()}"]
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    store = Store(tmp_path / "store" / "evolver.duckdb")
    with store:
        run = store.latest_run(pattern=LOOP_RUN_ID)
        (prop,) = store.proposals(run["run_id"])
        assert prop["operator"] == "mine-skill" and prop["status"] in ("admitted", "discarded"), prop
        detail = prop["detail"]
        assert detail["round"] == 1 and detail["cases"] >= (8 if demos else 1)
        if demos:
            assert detail["demos"] == 4 and "rollouts" not in detail
        else:  # the practice rollouts were played first, stored, and mined
            assert detail["demos"] == 0 and detail["rollouts"]["kept"] >= 1
            assert detail["stored"] >= 3 * 3, detail  # the loop's batch and the practice (greedy + samples)
        assert detail["checkpoint"].startswith(f"checkpoints/{run['run_id']}-mine-skill-it0/")
        cid = prop["candidate_id"]
        _, rows = store.query("SELECT s.prompt FROM steps s JOIN episodes e USING (episode_id) WHERE e.run_id = ? "
                              "AND e.program_id = ? AND e.split = 'dev'", [run["run_id"], cid])
        prompts = [row[0] for row in rows]
        assert prompts and any("[mined-moves] Next: open" in p for p in prompts), prompts[:1]
    from evolver import ProgramRepo
    repo = ProgramRepo(tmp_path / "store")
    files = repo.checkout(cid)
    assert (Path(files.root) / "skills" / "mined-moves" / mining.DATA_FILE).is_file()


def test_unset_mining_counts_are_a_floor_a_category_and_a_total_and_a_set_one_holds():
    """A benchmark of one category (any Gymnasium environment) mines as much a round as twx's six games."""
    from evolver_experience.miner import DEMOS, EXPLORE, spread
    assert [spread(None, *EXPLORE, c) for c in (1, 4, 6, 30)] == [360, 90, 60, 60]
    assert [spread(None, *DEMOS, c) for c in (1, 6, 30)] == [216, 36, 36]
    assert spread(5, *DEMOS, 1) == 5 and spread(0, *EXPLORE, 1) == 0


def test_a_one_category_benchmark_explores_the_total_and_the_miner_counts_its_candidates():
    bench = DoorBench(demos=False)  # one category of doors
    run, _ = fake_run(bench, [])
    miner = SkillMinerProposer(run, train="none", explore_sweeps=1)
    assert len({e.task.id for e in miner.exploration(0, [])}) == 360  # 60 a category would be 60
    assert len(SkillMinerProposer(run, train="none", explore_per_category=7, explore_sweeps=1).exploration(0, [])) == 7
    assert miner.drafts == 1 and SkillMinerProposer(run, train="auto").drafts == 3


def test_a_benchmark_whose_tasks_list_no_actions_is_told_why_exploring_found_nothing(tmp_path):
    from evolver.types import Observation

    class Free(DoorEnv):  # a free-text reply: no valid actions to pick at random
        def _obs(self, text, score, done=False):
            return Observation(text, actions=None, score=score, done=done)

    class FreeBench(DoorBench):
        def env(self, task):
            return Free(task)
    run, logged = fake_run(FreeBench(demos=False), [])
    ctx = SimpleNamespace(iteration=0, parent=SimpleNamespace(id="seed", root=str(tmp_path), manifest={}),
                          frontier=None, new_draft=lambda *a, **k: None)
    assert SkillMinerProposer(run, train="none", explore_sweeps=1).propose(ctx) == []
    assert any("list no valid actions, so exploring at random played none" in line for line in logged), logged


def test_exploring_starts_no_task_past_its_deadline_and_the_miner_says_where_it_stopped():
    import time
    bench = DoorBench(demos=False)
    tasks = bench.tasks("train", 40)
    assert mining.explored(bench, tasks, seed=0, deadline=time.monotonic()) == []
    later = time.monotonic() + 600
    assert len(mining.explored_sweeps(bench, tasks, 2, seed=0, deadline=later)) == \
        len(mining.explored_sweeps(bench, tasks, 2, seed=0))
    run, logged = fake_run(bench, [])
    got = SkillMinerProposer(run, train="none", explore_wall_s=1e-6).exploration(0, [])
    assert len(got) <= 1  # the first task may start before the clock is read again
    assert any("exploring stopped at its 0 s (explore_wall_s)" in line and "of the 1080 planned" in line
               for line in logged), logged


def test_a_run_without_demonstrations_is_told_so_when_there_is_nothing_to_mine(tmp_path):
    run, logged = fake_run(DoorBench(demos=False), [])
    run.config = SimpleNamespace(demonstrations=False)
    ctx = SimpleNamespace(iteration=0, parent=SimpleNamespace(id="seed", root=str(tmp_path), manifest={}),
                          frontier=None, new_draft=lambda *a, **k: None)
    assert SkillMinerProposer(run, train="none", explore_per_category=0).propose(ctx) == []
    assert any("the run uses none of the benchmark's demonstrations (demonstrations = false)" in line
               for line in logged), logged


def test_a_second_run_in_the_same_folder_mines_the_rollouts_it_took_from_the_cache(tmp_path, tiny_dir, monkeypatch):
    """The second run plays the same training batch from the same seed: every rollout is a cache hit. It
    counts them among its own episodes, so its miner reads as many stored training episodes as the first."""
    from click.testing import CliRunner

    from evolver.cli import cli
    from evolver.store import Store

    args = [*door_run(tmp_path, tiny_dir, monkeypatch, "transformers,experience"), "run", "--iterations", "1",
            "--proposer", "skill-miner", "--set=loop.dev_per_category=2", "--set=loop.test_per_category=1",
            "--set=loop.train_per_category=2", "--set=loop.failure_threshold=1.01", "--set=demonstrations=false",
            "--set=plugins.skill-miner={explore_per_category = 0, train = \"none\"}"]
    stored = []
    for _ in range(2):
        r = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert r.exit_code == 0, r.output
        with Store(tmp_path / "store" / "evolver.duckdb") as store:
            run_id = store.query("SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 1")[1][0][0]
            rows = store.query("SELECT detail FROM proposals WHERE run_id = ? AND proposer = 'skill-miner'", [run_id])[1]
            mined = [json.loads(d)["stored"] if isinstance(d, str) else d["stored"] for (d,) in rows]
            own = store.query("SELECT count(*) FROM episodes WHERE run_id = ? AND split = 'train'", [run_id])[1][0][0]
        stored.append((mined, own))
    (first, own1), (second, own2) = stored
    assert first and first[0] > 0 and own1 > 0
    assert own2 == 0 and second == first  # nothing played anew, all of it mined again
