"""Imitation and expert iteration are proposers like any other: each trains a checkpoint from the
parent's weights in a run of its own, and the candidate carrying it is checked, evaluated with its own
weights and judged by the frontier."""
import json

import pytest
from click.testing import CliRunner

from evolver.cli import cli
from evolver.run import LOOP_RUN_ID
from evolver.store import Store

HERE = __import__("pathlib").Path(__file__).resolve().parent


def run_cli(tmp_path, tiny_dir, monkeypatch, *extra, demos=True):
    from evolver import plugins

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVOLVER_PLUGINS", "transformers,grpo,skillrl,experience")
    plugins.reset()
    roles = ("executor", "proposer", "builder", "judge")
    args = ["--plugin", str(HERE / "demobench.py"), "--store", str(tmp_path / "store"),
            "--set=benchmark=demoletters", f"--set=benchmark_options={{demos = {str(demos).lower()}}}",
            *[f"--set=roles.{r}.backend=transformers" for r in roles],
            *[f"--set=roles.{r}.model={tiny_dir}" for r in roles],
            "--set=roles.executor.options={dtype = \"fp32\"}",
            "run", "--iterations", "1", "--set=loop.dev_per_category=2", "--set=loop.test_per_category=2",
            "--set=loop.staged=false", "--set=loop.train_per_category=1", "--set=loop.failure_threshold=1.01",
            *extra]
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


def loop_run(tmp_path):
    store = Store(tmp_path / "store" / "evolver.duckdb")
    return store, store.latest_run(pattern=LOOP_RUN_ID)


def test_imitation_and_expert_iteration_propose_trained_checkpoints(tmp_path, tiny_dir, monkeypatch):
    run_cli(tmp_path, tiny_dir, monkeypatch, "--proposer", "imitation", "--proposer", "expert-iteration",
            "--set=loop.candidates_per_iteration=2",
            "--set=plugins.imitation={per_category = 2, lr = 0.01, batch_size = 2, autocast = false}",
            "--set=plugins.expert-iteration={tasks_per_category = 2, first_task = 0, samples = 3, "
            "temperature = 1.5, min_trajectories = 1, min_score = 0.0, min_parent_score = 0.0, wide_below = 0.0, lr = 0.01, batch_size = 2, autocast = false}")
    store, run = loop_run(tmp_path)
    with store:
        assert run["status"] == "finished"
        props = {p["operator"]: p for p in store.proposals(run["run_id"])}
        assert set(props) == {"imitation", "expert-iteration"}, props
        for op, prop in props.items():
            assert prop["status"] in ("admitted", "discarded"), prop
            train_id = f"{run['run_id']}-{op}-it0"
            assert store.get_run(train_id)["status"] == "finished"
            _, steps = store.query("SELECT count(*) FROM train_steps WHERE run_id = ?", [train_id])
            assert steps[0][0] >= 1
            _, rows = store.query("SELECT manifest FROM programs WHERE run_id = ? AND program_id = ?",
                                  [run["run_id"], prop["candidate_id"]])
            manifest = json.loads(rows[0][0])
            assert manifest["model"].startswith(f"checkpoints/{train_id}/sft-step-")
            assert (tmp_path / "store" / manifest["model"] / "config.json").is_file()
            # the candidate played dev with its own checkpoint
            _, models = store.query("SELECT DISTINCT model FROM episodes WHERE run_id = ? AND program_id = ? "
                                    "AND split = 'dev'", [run["run_id"], prop["candidate_id"]])
            assert models and all(train_id in m[0] for m in models)
        # imitation learned the demonstrations: 2 categories x 2 tasks x 2 steps of "aaaa"
        detail = props["imitation"]["detail"]
        assert detail["trajectories"] == 4 and detail["samples"] == 8 and detail["round"] == 1
        assert sum(n for _, n in detail["demos"].values()) == 4
        assert all(first == 0 for first, _ in detail["demos"].values())  # the first round starts at task 0
        assert detail["losses"][-1] < detail["losses"][0]
        # expert iteration kept the best sampled rollout of each task it trained on
        stats = props["expert-iteration"]["detail"]["rollouts"]
        assert stats["kept"] >= 1 and stats["kept_score"] >= stats["greedy_score"]
        _, sampled = store.query("SELECT count(*) FROM episodes WHERE run_id = ? AND purpose = 'train' "
                                 "AND seed > 0", [run["run_id"]])
        assert sampled[0][0] == 3 * 4  # 3 samples x 2 categories x 2 tasks


def test_a_benchmark_without_demonstrations_gets_no_imitation_candidate(tmp_path, tiny_dir, monkeypatch):
    run_cli(tmp_path, tiny_dir, monkeypatch, "--proposer", "imitation", "--set=loop.candidates_per_iteration=1",
            demos=False)
    store, run = loop_run(tmp_path)
    with store:
        assert run["status"] == "finished"
        assert store.proposals(run["run_id"]) == []
        assert store.get_run(f"{run['run_id']}-imitation-it0") is None


def test_each_imitation_round_takes_the_next_slice_and_max_rounds_stops_it():
    from evolver_experience.imitation import ImitationProposer
    from evolver_experience.train import split_options

    from evolver.errors import ConfigError

    class Repo:
        manifests = {"c2": {"parent": "c1", "operator": "imitation"}, "c1": {"parent": "e1", "operator": "evoskill"},
                     "e1": {"parent": "seed", "operator": "imitation"}, "seed": {"parent": "", "operator": "seed"}}

        def manifest(self, pid):
            return self.manifests[pid]

    class Run:
        repo, logged = Repo(), []

        def log(self, msg):
            self.logged.append(msg)

    class Ctx:
        iteration = 0

        class parent:
            id = "c2"

    proposer = ImitationProposer(Run(), max_rounds=2, lr=1e-4)
    assert proposer.sft == {"lr": 1e-4}
    assert proposer.propose(Ctx()) == [] and "2 rounds" in Run.logged[-1]
    with pytest.raises(ConfigError, match="unknown key"):
        split_options(type(proposer.cfg), {"per_categroy": 3}, "imitation")


def test_expert_iteration_skips_a_parent_that_rarely_scores_without_playing():
    from evolver.frontier import Frontier
    from evolver_experience.expert import ExpertIterationProposer

    class Run:
        logged = []

        def log(self, msg):
            self.logged.append(msg)

    frontier = Frontier.from_config(["score:max"])
    frontier.consider("seed", {"score": 0.1}, -1)

    from types import SimpleNamespace

    from evolver.proposers import ProposeContext
    ctx = ProposeContext(run=None, iteration=0, parent=SimpleNamespace(id="seed"), failures=[], successes=[],
                         history=[], frontier=frontier, n=1)
    proposer = ExpertIterationProposer(Run(), min_parent_score=0.25)
    proposer.rollouts = lambda ctx: pytest.fail("a weak parent must not be played")
    assert proposer.propose(ctx) == []
    assert "below min_parent_score" in Run.logged[-1]


def test_a_round_is_shared_out_by_failures_and_starts_after_the_tasks_earlier_rounds_used():
    from evolver_experience.imitation import ImitationProposer, allocate

    assert allocate(12, {"a": 1.0, "b": 1.0, "c": 1.0}) == {"a": 4, "b": 4, "c": 4}
    assert allocate(12, {"a": 0.25, "b": 1.0, "c": 0.75}) == {"a": 2, "b": 6, "c": 4}
    assert sum(allocate(7, {"a": 0.3, "b": 0.3, "c": 0.4}).values()) == 7

    class Store:
        def evaluations(self, run_id, program_id, split):
            return [{"per_category": {"a": 1.0, "b": 0.0, "c": 0.5}}]

    class Bench:
        categories = ["a", "b", "c"]

    class Run:
        id, store, benchmark = "r", Store(), Bench()

    class Parent:
        id = "p1"

    proposer = ImitationProposer(Run(), per_category=4, min_share=0.25)
    ancestors = [{"operator": "imitation", "demos": {"a": [0, 4], "b": [0, 4], "c": [0, 4]}},
                 {"operator": "seed"}]
    # 12 demonstrations: weights 0.25 / 1.0 / 0.5; each category goes on after the 4 tasks round 1 used
    assert proposer.plan(Parent, ancestors) == {"a": [4, 2], "b": [4, 7], "c": [4, 3]}
    unfocused = ImitationProposer(Run(), per_category=4, focus=False)
    assert unfocused.plan(Parent, [{"operator": "seed"}]) == {"a": [0, 4], "b": [0, 4], "c": [0, 4]}


def test_a_rollout_that_did_not_win_is_kept_up_to_its_last_rewarded_step():
    from evolver import Episode, Step, Task
    from evolver_experience.expert import credited

    task = Task(id="t/train/0", benchmark="t", split="train", category="c")
    ep = Episode(task=task, program_id="p", program_hash="h", model="m", seed=1, score=0.5)
    for i, r in enumerate([0.0, 0.25, 0.25, 0.5, 0.5, 0.5]):
        ep.steps.append(Step(index=i, prompt="", output=f"a{i}", action=f"a{i}", observation="", reward=r))
    assert [s.action for s in credited(ep).steps] == ["a0", "a1", "a2", "a3"]
    assert len(ep.steps) == 6  # the stored episode is left as it was
    flat = Episode(task=task, program_id="p", program_hash="h", model="m", seed=1,
                   steps=[Step(index=0, prompt="", output="x", action="x", observation="", reward=0.0)])
    assert credited(flat) is flat
