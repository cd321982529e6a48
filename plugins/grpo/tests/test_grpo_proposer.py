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
