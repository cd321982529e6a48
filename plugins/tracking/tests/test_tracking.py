"""A toy run reports to TensorBoard and MLflow offline; each is read back with its own reader: the config,
per-iteration scores and candidate outcomes, the training steps, the test scores and the report."""
import json
import sys
from pathlib import Path

import pytest
from tracking_helpers import fake_run

import evolver_tracking as tracking
from evolver import ConfigError
from evolver_tracking.options import load_options
from evolver_tracking.trackers import open_tracker


def tensorboard_events(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def scalars(acc, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def texts(acc, tag: str) -> list[tuple[int, str]]:
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)]


def test_tensorboard_event_files_hold_the_config_iterations_training_test_scores_and_report(tracked_run):
    store, run_id = tracked_run
    acc = tensorboard_events(store / "tracking" / "tensorboard" / run_id)
    config = texts(acc, "config")[0][1]
    assert json.loads(config.removeprefix("```json\n").removesuffix("\n```"))["benchmark"] == "upper"
    assert [s for s, _ in scalars(acc, "iteration/train_score")] == [0, 1]
    # iteration 0: p0001 admitted (the skill that solves the toy), p0002 rejected; iteration 1: p0003 not admitted
    assert scalars(acc, "candidates/admitted") == [(0, 1.0), (1, 0.0)]
    assert scalars(acc, "candidates/rejected") == [(0, 1.0), (1, 0.0)]
    assert scalars(acc, "candidates/discarded") == [(0, 0.0), (1, 1.0)]
    assert scalars(acc, "frontier/best_score")[-1] == (1, 1.0)
    candidates = dict(texts(acc, "candidates"))
    assert "p0001" in candidates[0] and "admitted" in candidates[0] and "no front matter" in candidates[0]
    # the proposer's training run (RUN-toy-it0) reports into the loop run's tracker, nested metrics joined
    assert scalars(acc, "train/toy-it0/loss") == [(1, 2.0), (2, 1.0)]
    assert scalars(acc, "train/toy-it0/rewards/win") == [(1, 0.25), (2, 0.75)]
    assert scalars(acc, "test/best/score") == [(2, 1.0)]
    assert "test/best-of-n/score" in acc.Tags()["scalars"]
    report = (store / "reports" / f"{run_id}.md").read_text()
    assert texts(acc, "report") == [(0, report)]
    assert (store / "tracking" / "tensorboard" / run_id / "report" / f"{run_id}.md").read_text() == report


def test_mlflow_file_store_holds_the_config_iterations_training_test_scores_and_report(tracked_run, monkeypatch):
    from mlflow.artifacts import load_text
    from mlflow.tracking import MlflowClient

    store, run_id = tracked_run
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient((store / "tracking" / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("evolver").experiment_id])
    assert (run.info.run_name, run.data.tags["evolver_run_id"], run.info.status) == (run_id, run_id, "FINISHED")
    params = run.data.params
    assert params["benchmark"] == "upper" and params["loop.iterations"] == "2"
    assert json.loads(params["plugins.tracking.report_to"]) == ["tensorboard", "mlflow"]

    def history(key):
        return [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
    assert [s for s, _ in history("iteration/train_score")] == [0, 1]
    assert history("candidates/admitted") == [(0, 1.0), (1, 0.0)]
    assert history("train/toy-it0/loss") == [(1, 2.0), (2, 1.0)]
    assert history("test/best/score") == [(2, 1.0)]
    assert {a.path for a in client.list_artifacts(run.info.run_id, "report")} == \
        {f"report/{run_id}.md", f"report/{run_id}.json"}
    assert load_text(f"{run.info.artifact_uri}/report/{run_id}.md") == (store / "reports" / f"{run_id}.md").read_text()
    assert "p0001" in load_text(f"{run.info.artifact_uri}/candidates/0000.md")


def test_evolver_train_steps_open_a_run_of_their_own_and_are_flushed_at_exit(tmp_path):
    pytest.importorskip("tensorboard")
    run = fake_run(tmp_path, "train-20250101-000000", report_to=["tensorboard"])
    for step in (1, 2, 3):
        tracking.on_train_step(run=run, step=step, metrics={"loss": 1.0 / step, "note": "text is skipped"})
    tracking._close_all()
    acc = tensorboard_events(tmp_path / "tracking" / "tensorboard" / run.id)
    assert scalars(acc, "train/loss") == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    assert acc.Tags()["scalars"] == ["train/loss"]


def test_a_run_without_report_to_reports_nothing(tmp_path):
    run = fake_run(tmp_path)
    tracking.on_run_start(run=run)
    tracking.on_train_step(run=run, step=1, metrics={"loss": 1.0})
    assert tracking._sessions == {} and not (tmp_path / "tracking").exists()


def test_a_tracker_that_is_not_installed_stops_the_run_at_its_start_with_the_pip_command(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(ConfigError, match=r"'wandb', which is not installed .*pip install wandb"):
        tracking.on_run_start(run=fake_run(tmp_path, report_to=["wandb"]))
    assert tracking._sessions == {}


def test_a_tracker_that_fails_later_is_dropped_and_the_run_goes_on(tmp_path):
    pytest.importorskip("tensorboard")
    logged = []
    run = fake_run(tmp_path, report_to=["tensorboard"])
    run.log = logged.append
    tracking.on_run_start(run=run)
    session = tracking._sessions[run.id]
    session.trackers[0].metrics = lambda *a: 1 / 0
    tracking.on_train_step(run=run, step=1, metrics={"loss": 1.0})
    tracking.on_train_step(run=run, step=2, metrics={"loss": 1.0})
    assert session.trackers == [] and len(logged) == 1 and "tensorboard failed in metrics" in logged[0]
    tracking.on_run_end(run=run, summary={})


@pytest.mark.parametrize("raw, message", [
    ({"report_too": ["mlflow"]}, "unknown option 'report_too'.*did you mean 'report_to'"),
    ({"report_to": ["tensorbord"]}, "unknown tracker 'tensorbord'; did you mean 'tensorboard'"),
    ({"project": 3}, "plugins.tracking.project"),
])
def test_options_are_checked_with_the_closest_name(raw, message):
    with pytest.raises(ConfigError, match=message):
        load_options(raw)


def test_report_to_may_name_one_tracker_as_a_string():
    assert load_options({"report_to": "mlflow"}).report_to == ["mlflow"]


def test_open_tracker_names_the_extra_for_each_tracker(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    extra = r"pip install mlflow-skinny \(or: pip install -e 'plugins/tracking\[mlflow\]'\)"
    with pytest.raises(ConfigError, match=extra):
        open_tracker("mlflow", tmp_path, load_options({}), "r1", False)


def test_a_resumed_run_continues_its_mlflow_run(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    run = fake_run(tmp_path, report_to=["mlflow"])
    for resumed, step in ((False, 0), (True, 1)):
        run.resumed = resumed
        tracking.on_run_start(run=run)
        tracking.on_iteration_end(run=run, iteration=step, summary={"train_score": 0.5})
        tracking.on_run_end(run=run, summary={})
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient((tmp_path / "tracking" / "mlruns").as_uri())
    (only,) = client.search_runs([client.get_experiment_by_name("evolver").experiment_id])
    assert [m.step for m in client.get_metric_history(only.info.run_id, "iteration/train_score")] == [0, 1]


def report_to_one(tmp_path: Path, tracker: str):
    """The hooks of a one-iteration run with one training step and a report, called directly."""
    run = fake_run(tmp_path, report_to=[tracker])
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "r1.md").write_text("# the report")
    tracking.on_run_start(run=run)
    tracking.on_iteration_end(run=run, iteration=0,
                              summary={"train_score": 0.5, "candidates": ["p1"], "admitted": ["p1"]})
    tracking.on_train_step(run=run, step=1, metrics={"loss": 2.0})
    tracking.on_run_end(run=run, summary={"report": str(tmp_path / "reports" / "r1.md"), "best": "p1",
                                          "test": {"p1": {"score": 0.75}}, "iterations": 1})


def wandb_records(path: Path) -> list:
    """The records of an offline run's ``.wandb`` file (LevelDB's log format after a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2

    raw, records, pos, chunk, block = path.read_bytes(), [], 7, b"", 32768
    while pos + 7 <= len(raw):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(raw[pos + 4:pos + 6], "little"), raw[pos + 6]
        chunk += raw[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            records.append(wandb_internal_pb2.Record.FromString(chunk))
            chunk = b""
    return records


def test_wandb_offline_run_holds_config_metrics_and_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):  # nothing under ~
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    pytest.importorskip("wandb")
    report_to_one(tmp_path, "wandb")
    (path,) = (tmp_path / "tracking" / "wandb").glob("offline-run-*/run-r1.wandb")
    records = wandb_records(path)
    config = {i.key: json.loads(i.value_json) for r in records if r.HasField("config") for i in r.config.update}
    assert config["plugins"] == {"tracking": {"report_to": ["wandb"]}}
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
               for r in records if r.HasField("history")]
    assert {"iteration": 0, "iteration/train_score": 0.5, "iteration/admitted": 1}.items() <= history[0].items()
    assert {"train/step": 1, "train/loss": 2}.items() <= history[1].items()
    assert history[2]["test/best/score"] == 0.75
    axes = {r.metric.name: r.metric.step_metric for r in records if r.HasField("metric")}
    assert axes["train/loss"] == "train/step" and axes["iteration/train_score"] == "iteration"
    (artifact,) = [r.artifact for r in records if r.HasField("artifact")]
    assert (artifact.type, [c.path for c in artifact.manifest.contents]) == ("report", ["r1.md"])


def test_trackio_local_run_holds_config_metrics_and_the_report(tmp_path, monkeypatch):
    import sqlite3

    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "tracking" / "trackio"))
    trackio_utils = pytest.importorskip("trackio.utils")
    report_to_one(tmp_path, "trackio")
    db = sqlite3.connect(Path(trackio_utils.TRACKIO_DIR) / "evolver.db")
    rows = [json.loads(m) for (m,) in db.execute("SELECT metrics FROM metrics WHERE run_name = 'r1' ORDER BY id")]
    assert {"iteration": 0, "iteration/train_score": 0.5}.items() <= rows[0].items()
    assert rows[1] == {"train/step": 1, "train/loss": 2.0} and rows[2]["test/best/score"] == 0.75
    (config,) = [json.loads(c) for (c,) in db.execute("SELECT config FROM configs WHERE run_name = 'r1'")]
    assert config["plugins.tracking.report_to"] == ["trackio"]
    assert db.execute("SELECT type FROM artifacts").fetchall() == [("report",)]
