"""One class per experiment tracker, all with the same five calls: ``params(config)`` once, ``metrics(values,
step, axis)`` as numbers come, ``text(tag, text, step)``, ``artifacts(paths)`` at the end, ``close()``.

Each imports its library when opened, so the plugin loads without any tracker installed; a tracker that is
named but missing is an error that gives the pip command (:func:`open_tracker`).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

from evolver import ConfigError

#: What to install for each tracker (the plugin's extras: ``pip install 'evolver-tracking[NAME]'``).
PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow-skinny", "wandb": "wandb", "trackio": "trackio"}


def flatten(tree: dict, prefix: str = "", sep: str = ".") -> dict:
    """``{"loop": {"iterations": 2}}`` -> ``{"loop.iterations": 2}``; lists and other leaves stay whole."""
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat |= flatten(value, name, sep)
        else:
            flat[name] = value
    return flat


def numbers(values: dict) -> dict[str, float]:
    """The numeric leaves of ``values`` (nested dicts flattened with ``/``), as floats; bools as 0/1."""
    return {k: float(v) for k, v in flatten(values, sep="/").items()
            if isinstance(v, (int, float)) and v == v}  # NaN: nothing to plot


class Tracker:
    """The calls the plugin makes; a tracker overrides those it supports (text and artifacts are optional)."""

    name = ""

    def params(self, config: dict) -> None:
        """The run's configuration, as nested dicts (``Config.model_dump``)."""

    def metrics(self, values: dict[str, float], step: int, axis: str) -> None:
        """Numbers at ``step`` of the x-axis ``axis`` (``iteration``, ``train/grpo-it3/step``, ...)."""

    def text(self, tag: str, text: str, step: int) -> None:
        """Markdown at ``step``."""

    def artifacts(self, paths: list[Path], name: str) -> None:
        """Files kept with the run under ``name`` (the report)."""

    def close(self) -> None:
        """Flush and finish the run."""


class TensorBoard(Tracker):
    """Event files in ``folder`` (``LOG_DIR/tensorboard/RUN``): scalars, and text for the config, the
    candidates of each iteration and the report (the report's files are also copied to ``folder/report``).
    Written with tensorboard's own event writer, so torch and TensorFlow are not needed."""

    name = "tensorboard"

    def __init__(self, folder: Path):
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._pb = event_pb2, summary_pb2
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._writer = EventFileWriter(str(folder))

    def _add(self, step: int, values: list) -> None:
        event_pb2, summary_pb2 = self._pb
        self._writer.add_event(event_pb2.Event(wall_time=time.time(), step=step,
                                               summary=summary_pb2.Summary(value=values)))

    def params(self, config: dict) -> None:
        self.text("config", "```json\n" + json.dumps(config, indent=2, default=str) + "\n```", 0)

    def metrics(self, values: dict[str, float], step: int, axis: str) -> None:
        _, summary_pb2 = self._pb
        self._add(step, [summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in values.items()])

    def text(self, tag: str, text: str, step: int) -> None:
        from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2

        _, summary_pb2 = self._pb
        meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode()],
                                        tensor_shape=tensor_shape_pb2.TensorShapeProto(
                                            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]))
        self._add(step, [summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)])

    def artifacts(self, paths: list[Path], name: str) -> None:
        (self.folder / name).mkdir(exist_ok=True)
        for path in paths:
            shutil.copy2(path, self.folder / name / path.name)
            if path.suffix == ".md":  # TensorBoard's text tab renders Markdown
                self.text(name, path.read_text(), 0)

    def close(self) -> None:
        self._writer.close()


class MLflow(Tracker):
    """An MLflow run (named after the evolver run, tagged ``evolver_run_id``) in ``experiment``: the config as
    params (flattened keys), metrics with their step, the report as artifacts under ``report/``. A resumed
    evolver run continues its MLflow run."""

    name = "mlflow"
    #: MLflow's limits: 100 params a batch, values of up to 6000 characters, 1000 metrics a batch.
    PARAM_BATCH, PARAM_CHARS, METRIC_BATCH = 100, 6000, 1000

    def __init__(self, uri: str, experiment: str, run_id: str, resumed: bool):
        if uri.startswith("file:"):
            # MLflow 3 keeps the file store in maintenance mode and refuses it unless asked for: a local
            # folder beside the workspace is what an offline run wants.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        found = self.client.get_experiment_by_name(experiment)
        exp_id = found.experiment_id if found else self.client.create_experiment(experiment)
        earlier = self.client.search_runs([exp_id], f"tags.evolver_run_id = '{run_id}'") if resumed else []
        self.resumed = bool(earlier)
        self.run_id = (earlier[0] if earlier else self.client.create_run(
            exp_id, run_name=run_id, tags={"evolver_run_id": run_id})).info.run_id

    def params(self, config: dict) -> None:
        if self.resumed:  # MLflow refuses to change a logged param; the first start's config stands
            return
        from mlflow.entities import Param

        flat = {re.sub(r"[^\w\-. /]", "_", k)[:250]: v for k, v in flatten(config).items()}
        params = [Param(k, (v if isinstance(v, str) else json.dumps(v, default=str))[:self.PARAM_CHARS])
                  for k, v in flat.items()]
        for i in range(0, len(params), self.PARAM_BATCH):
            self.client.log_batch(self.run_id, params=params[i:i + self.PARAM_BATCH])

    def metrics(self, values: dict[str, float], step: int, axis: str) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        rows = [Metric(k, v, now, step) for k, v in values.items()]
        for i in range(0, len(rows), self.METRIC_BATCH):
            self.client.log_batch(self.run_id, metrics=rows[i:i + self.METRIC_BATCH])

    def text(self, tag: str, text: str, step: int) -> None:
        self.client.log_text(self.run_id, text, f"{tag}/{step:04d}.md")

    def artifacts(self, paths: list[Path], name: str) -> None:
        for path in paths:
            self.client.log_artifact(self.run_id, str(path), artifact_path=name)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _safe_id(run_id: str) -> str:
    return re.sub(r"[^\w\-]", "-", run_id)


def _with_axis(values: dict[str, float], step: int, axis: str) -> dict:
    """wandb and trackio plot against one step that only grows; each of our sections has its own x-axis
    (``iteration``, a training run's ``train/.../step``), logged as a value beside the metrics."""
    return {axis: step, **values}


class Wandb(Tracker):
    """A wandb run with the evolver run's id (``WANDB_MODE=offline`` keeps it in ``LOG_DIR/wandb``): config,
    metrics against their own x-axis (``define_metric``), the report as an artifact of type ``report``."""

    name = "wandb"

    def __init__(self, folder: Path, project: str, group: str, run_id: str):
        import wandb

        folder.mkdir(parents=True, exist_ok=True)
        self._wandb = wandb
        self.run = wandb.init(project=project, group=group, name=run_id, id=_safe_id(run_id), dir=str(folder),
                              resume="allow")
        self._defined: set[str] = set()

    def params(self, config: dict) -> None:
        self.run.config.update(config, allow_val_change=True)

    def metrics(self, values: dict[str, float], step: int, axis: str) -> None:
        for key in set(values) - self._defined:
            self.run.define_metric(key, step_metric=axis)
            self._defined.add(key)
        self.run.log(_with_axis(values, step, axis))

    def artifacts(self, paths: list[Path], name: str) -> None:
        art = self._wandb.Artifact(f"{name}-{_safe_id(self.run.name)}", type=name)
        for path in paths:
            art.add_file(str(path))
        self.run.log_artifact(art)

    def close(self) -> None:
        self.run.finish()


class Trackio(Tracker):
    """A trackio run in ``project`` (its local database: ``TRACKIO_DIR``, by default ``LOG_DIR/trackio``):
    config, metrics with their x-axis as a value, the report as an artifact."""

    name = "trackio"

    def __init__(self, folder: Path, project: str, group: str, run_id: str):
        os.environ.setdefault("TRACKIO_DIR", str(folder))  # read when trackio is first imported
        import inspect

        import trackio

        # No system-metrics thread (newer trackio samples CPU and GPU on its own) and no dashboard.
        wanted = dict(group=group, resume="allow", embed=False, auto_log_cpu=False, auto_log_gpu=False)
        known = inspect.signature(trackio.init).parameters
        self.run = trackio.init(project=project, name=run_id, **{k: v for k, v in wanted.items() if k in known})

    def params(self, config: dict) -> None:
        self.run.config.update(flatten(config))

    def metrics(self, values: dict[str, float], step: int, axis: str) -> None:
        self.run.log(_with_axis(values, step, axis))

    def artifacts(self, paths: list[Path], name: str) -> None:
        for path in paths:
            self.run.log_artifact(path, name=f"{name}-{_safe_id(self.run.name)}-{path.suffix.lstrip('.')}",
                                  type=name)

    def close(self) -> None:
        self.run.finish()


def open_tracker(name: str, log_dir: Path, options, run_id: str, resumed: bool) -> Tracker:
    """Start tracker ``name`` for the evolver run ``run_id``; a missing library is a ConfigError with the
    pip command."""
    try:
        if name == "tensorboard":
            return TensorBoard(log_dir / "tensorboard" / run_id)
        if name == "mlflow":
            uri = options.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI") or (log_dir / "mlruns").as_uri()
            return MLflow(uri, options.experiment, run_id, resumed)
        if name == "wandb":
            return Wandb(log_dir, options.project, options.experiment, run_id)
        if name == "trackio":
            return Trackio(log_dir / "trackio", options.project, options.experiment, run_id)
    except ImportError as exc:
        raise ConfigError(f"[plugins.tracking] report_to names {name!r}, which is not installed ({exc}): "
                          f"pip install {PACKAGES[name]} (or: pip install -e 'plugins/tracking[{name}]')") from None
    raise ConfigError(f"[plugins.tracking] report_to: unknown tracker {name!r}")
