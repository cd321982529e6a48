"""The tracking plugin's options: ``[plugins.tracking]`` (``--set plugins.tracking.KEY=VALUE``)."""
from __future__ import annotations

import difflib
from typing import Literal

from pydantic import BaseModel, ConfigDict

from evolver import ConfigError, plugin_options

TRACKERS = ("tensorboard", "mlflow", "wandb", "trackio")


class TrackingOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    report_to: list[Literal["tensorboard", "mlflow", "wandb", "trackio"]] = []
    """The trackers a run reports to; empty: none (the plugin does nothing)."""
    log_dir: str | None = None
    """Where local trackers write: TensorBoard's event files (``LOG_DIR/tensorboard/RUN``), MLflow's file
    store (``LOG_DIR/mlruns``), wandb's and trackio's offline files. Default: the workspace's ``tracking/``;
    a relative path is relative to the workspace."""
    project: str = "evolver"
    """The wandb / trackio project."""
    experiment: str = "evolver"
    """The MLflow experiment (created when missing); wandb's and trackio's run group."""
    mlflow_uri: str | None = None
    """MLflow's tracking URI (a server, ``sqlite:///...``); default: ``MLFLOW_TRACKING_URI`` when set, else
    the file store in ``LOG_DIR/mlruns``."""


def load_options(raw: dict | None) -> TrackingOptions:
    """Validate ``[plugins.tracking]``; a mistake is a :class:`evolver.ConfigError` naming the closest key
    or tracker."""
    raw = dict(raw or {})
    for key in raw:
        if key not in TrackingOptions.model_fields:
            close = difflib.get_close_matches(key, list(TrackingOptions.model_fields), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(TrackingOptions.model_fields)}"
            raise ConfigError(f"[plugins.tracking]: unknown option {key!r} (plugins.tracking.{key}); {hint}")
    if isinstance(raw.get("report_to"), str):  # report_to = "mlflow" means one tracker
        raw["report_to"] = [raw["report_to"]]
    for name in raw.get("report_to") or []:
        if name not in TRACKERS:
            close = difflib.get_close_matches(str(name), TRACKERS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(TRACKERS)}"
            raise ConfigError(f"[plugins.tracking] report_to: unknown tracker {name!r}; {hint}")
    return plugin_options(TrackingOptions, raw, "tracking")
