"""`evolver run --proposer grpo`: the loop's training step. The trained candidate carries its
checkpoint in the manifest and is evaluated with those weights, while every other program keeps
playing with the configured executor, which is never trained in place."""
from letterbench import cli_args


def test_run_with_the_grpo_proposer_plays_the_trained_checkpoint(tmp_path, tiny_dir, monkeypatch):
    from click.testing import CliRunner

    from evolver.cli import cli
    from evolver.run import LOOP_RUN_ID
    from evolver.store import Store

    args = cli_args(tmp_path, tiny_dir, monkeypatch) + ["--set=roles.executor.options={dtype = \"fp32\"}"]
    r = CliRunner().invoke(cli, args + [
        "run", "--proposer", "grpo", "--iterations", "1", "--set=loop.candidates_per_iteration=1",
        "--set=loop.dev_per_category=1", "--set=loop.test_per_category=1", "--set=loop.staged=false",
        "--set=plugins.grpo.steps=2", "--set=plugins.grpo.group_size=2", "--set=plugins.grpo.tasks_per_step=2",
        "--set=plugins.grpo.max_new_tokens=4", "--set=plugins.grpo.lr=0.01"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    with Store(tmp_path / "store" / "evolver.duckdb") as store:
        run = store.latest_run(pattern=LOOP_RUN_ID)
        assert run["status"] == "finished"
        (prop,) = store.proposals(run["run_id"])
        assert prop["operator"] == "grpo" and prop["status"] in ("admitted", "discarded")
        train_id = f"{run['run_id']}-grpo-it0"
        assert store.get_run(train_id)["status"] == "finished"
        _, steps = store.query("SELECT count(*) FROM train_steps WHERE run_id = ?", [train_id])
        assert steps[0][0] == 2
        _, rows = store.query("SELECT manifest FROM programs WHERE run_id = ? AND program_id = ?",
                              [run["run_id"], prop["candidate_id"]])
        import json

        manifest = json.loads(rows[0][0])
        assert manifest["model"] == f"checkpoints/{train_id}/step-2"
        assert (tmp_path / "store" / manifest["model"] / "config.json").is_file()
        # the candidate played dev with its checkpoint; the seed with the configured model
        _, models = store.query("SELECT program_id, split, list(DISTINCT model) FROM episodes WHERE run_id = ? "
                                "AND purpose = 'eval' GROUP BY 1, 2", [run["run_id"]])
        by = {(p, s): m for p, s, m in models}
        assert all("checkpoints" in m and train_id in m for m in by[(prop["candidate_id"], "dev")])
        assert all("checkpoints" not in m for m in by[("seed", "dev")])
        assert all("checkpoints" not in m for m in by[("seed", "test")])
    # nothing else was committed for the training run: the candidate is its only program
    from evolver.programs import ProgramRepo

    tags = ProgramRepo(tmp_path / "store").tags("program/")
    assert not any("grpo-" in t for t in tags), tags


def test_the_proposer_trains_within_its_share_of_the_search_and_proposes_only_what_learnt(monkeypatch):
    """Unit test (a stand-in run and frontier): the wall-time share, ``min_parent_score``, and training
    in which no group had a spread proposing nothing."""
    from types import SimpleNamespace as NS

    import evolver_grpo.proposer as mod

    logs, trained = [], []
    run = NS(config=NS(loop=NS(max_wall_s=1000.0)), elapsed=lambda: 600.0, log=logs.append,
             checkpoint_of=lambda parent: None)
    member = NS(metrics={"score": 0.2})
    from evolver.proposers import ProposeContext
    ctx = ProposeContext(run=run, iteration=1, parent=NS(id="p0003"), failures=[], successes=[], history=[],
                         frontier=NS(get=lambda pid: member), n=1)
    proposer = mod.GRPOProposer(run, steps=4, wall_share=0.5, min_wall_s=60, min_parent_score=0.3)
    assert proposer.allowed_s() == 200.0  # half of the 400 s left
    assert proposer.propose(ctx) == [] and "below min_parent_score" in logs[-1]

    def train(loop_run, ctx, operator, make, options, status, metric):
        trained.append(options)
        return "r-grpo-it1", {"steps": 2, "checkpoint": "checkpoints/x/step-2", "history": [
            {"step": 1, "reward_mean": 1.0, "zero_var_frac": 1.0}, {"step": 2, "reward_mean": 1.0, "zero_var_frac": 1.0}]}
    monkeypatch.setattr(mod, "train_in_own_run", train)
    member.metrics["score"] = 0.9
    assert proposer.propose(ctx) == [] and "nothing to learn" in logs[-1]
    assert trained[-1]["max_wall_s"] == 200.0 and trained[-1]["program"] == "p0003"
    assert trained[-1]["seed"] == 1  # a seed of its own each iteration: a parent trained on again samples anew
    run.elapsed = lambda: 950.0  # 25 s of share left: under min_wall_s, no training at all
    assert proposer.propose(ctx) == [] and "no training this time" in logs[-1] and len(trained) == 1
