"""The skill miner prices its candidate before the search: its first notes followed through training
tasks it did not mine, with no model, and the moves they leave to the model counted."""
import shutil
import time
from types import SimpleNamespace

from doorbench import DoorBench
from evolver import Episode, Step
from evolver.harness import SEED_DIR
from evolver_experience import mining
from evolver_experience.miner import SkillMinerProposer
from doorruns import door_run, fake_run, played


def pilot(bench, tokens_a_move=100):
    """The seed's first rollouts as the store keeps them: every move a model call of ``tokens_a_move``."""
    out = []
    for task in bench.tasks("train", 3):
        ep = played(bench, task, ["look around", "look around", "open red door"])
        ep.steps = [Step(index=s.index, prompt="", output=s.action, action=s.action, observation=s.observation,
                         reward=s.reward, prompt_tokens=tokens_a_move) for s in ep.steps]
        ep.tally()
        out.append(ep)
    return out


def seed_at(tmp_path):
    root = tmp_path / "seed"
    shutil.copytree(SEED_DIR, root)
    return SimpleNamespace(id="seed", root=str(root), manifest={})


def test_notes_mined_from_demonstrations_leave_few_moves_to_the_model_and_the_round_mines_them_once(
        tmp_path, monkeypatch):
    bench = DoorBench()
    run, logged = fake_run(bench, [])
    proposer = SkillMinerProposer(run, train="none", demos_per_category=24)
    slices = []
    real = SkillMinerProposer.demonstrations
    monkeypatch.setattr(SkillMinerProposer, "demonstrations", lambda self, k: slices.append(k) or real(self, k))
    seed = seed_at(tmp_path)
    ratio = proposer.price(seed, pilot(bench))
    # each training door game offers 4 moves; the notes of 24 games name the door for the colours they saw
    assert ratio is not None and 0.0 <= ratio < 0.5, logged
    assert any("moves to the model on 72 training tasks it had not mined" in line for line in logged), logged

    def new_draft(operator, hypothesis="", detail=None):
        path = tmp_path / "draft"
        shutil.copytree(seed.root, path)
        return SimpleNamespace(path=str(path), manifest={}, hypothesis=hypothesis, detail=detail)
    ctx = SimpleNamespace(iteration=0, parent=seed, frontier=None, n=1, new_draft=new_draft, history=[])
    assert len(proposer.propose(ctx)) == 1
    assert slices == [0]  # the round built from the slice price() had mined
    ctx.iteration = 1
    ctx.history = [{"iteration": 0, "operator": "mine-skill"}]
    shutil.rmtree(tmp_path / "draft")
    proposer.propose(ctx)
    assert slices == [0, 1]


def test_notes_that_never_name_a_move_price_the_candidate_at_the_seeds_rate_and_a_task_without_actions_too():
    bench = DoorBench()
    cases = mining.mine(mining.demonstrated(bench, bench.tasks("train", 2)), bench)
    tasks = bench.tasks("train", 4)[2:]
    covered = mining.trial(bench, tasks, cases)
    blind = mining.trial(bench, tasks, [])
    assert all(asked <= moves for asked, moves in covered) and all(asked == moves for asked, moves in blind)
    assert sum(a for a, _ in covered) < sum(a for a, _ in blind)

    class Mute(DoorBench):
        def env(self, task):
            env = super().env(task)
            first = env.reset

            def reset():
                obs = first()
                obs.actions = None
                return obs
            env.reset = reset
            return env
    assert mining.trial(Mute(), tasks, cases) == [None, None]
    assert mining.trial(bench, tasks, cases, deadline=time.monotonic()) == []  # a slow simulator: no task past it


def test_a_trained_candidate_nothing_to_mine_or_a_pilot_without_model_calls_gets_no_price(tmp_path):
    bench = DoorBench(demos=False)
    seed = seed_at(tmp_path)
    run, _ = fake_run(bench, [])
    assert SkillMinerProposer(run, train="imitation").price(seed, pilot(bench)) is None
    flat = [Episode(task=e.task, program_id="seed", program_hash="h", model="m", seed=0, steps=e.steps)
            for e in pilot(bench)]
    for e in flat:
        e.steps = [Step(index=s, prompt="", output="look around", action="look around", observation="",
                        reward=0.0, prompt_tokens=100) for s in range(bench.max_steps)]
        e.tally()
    assert SkillMinerProposer(run, train="none", explore_per_category=0).price(seed, flat) is None
    assert SkillMinerProposer(run, train="none").price(seed, pilot(bench, tokens_a_move=0)) is None


def test_where_the_notes_are_silent_the_stand_in_plays_the_seeds_habits():
    """A seed that always looked around keeps looking around in the trial (until it has looked in that
    very state, as the harness's loop guard has it), where one that picked at random opens a door soon."""
    bench = DoorBench()
    tasks = bench.tasks("train", 12)
    habit = mining.trial(bench, tasks, [], habits={"look around": 10_000})
    random_play = mining.trial(bench, tasks, [])
    assert all(moves >= 3 for _, moves in habit)  # looked around twice, then a door
    assert sum(m for _, m in random_play) < sum(m for _, m in habit)


def test_a_run_prices_the_miners_candidate_before_its_search_and_keeps_that_price_after_the_smoke(
        tmp_path, tiny_dir, monkeypatch):
    from click.testing import CliRunner

    from evolver.cli import cli
    from evolver.run import LOOP_RUN_ID
    from evolver.store import Store

    args = [*door_run(tmp_path, tiny_dir, monkeypatch, "transformers,experience"), "run", "--iterations", "1", "--proposer", "skill-miner", "--set=loop.dev_per_category=3",
            "--set=loop.test_per_category=2", "--set=loop.train_per_category=2", "--set=loop.failure_threshold=1.01",
            "--set=plugins.skill-miner={demos_per_category = 8}"]
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    with Store(tmp_path / "store" / "evolver.duckdb") as store:
        run_id = store.latest_run(pattern=LOOP_RUN_ID)["run_id"]
        est = store.get_run(run_id)["summary"]["estimate"]
    report = (tmp_path / "store" / "reports" / f"{run_id}.md").read_text()
    assert "It priced candidates at" in report and "as their proposers said (skill-miner" in report
    assert set(est["priced"]) == {"skill-miner"} and est["ratio"] == est["priced"]["skill-miner"] < 1
    assert est["revised"]["ratio"] == est["ratio"] and est["revised"]["kept"] == ["skill-miner"]
