"""Every evolver-tracking test runs with the plugin loaded, as an installed one is (the suite's EVOLVER_PLUGINS
leaves it out); ``tracked_run`` is one finished run of the toy benchmark reporting to TensorBoard and MLflow,
built once per module."""
import pytest
from tracking_helpers import load_tracking, toy_run


@pytest.fixture(autouse=True)
def tracking_loaded():
    load_tracking()


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    """(store folder, run id) of a finished two-iteration run reporting to TensorBoard and MLflow."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    return toy_run(tmp_path_factory.mktemp("tracked-run"), {"report_to": ["tensorboard", "mlflow"]})
