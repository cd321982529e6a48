import os

import pytest

# Keep installed third-party plugins out of the tests; first-party ones are loaded explicitly.
os.environ.setdefault("EVOLVER_PLUGINS", "evoskill")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def fresh_plugins(monkeypatch, tmp_path):
    from evolver import plugins

    monkeypatch.setenv("EVOLVER_HOME", os.environ.get("EVOLVER_HOME", str(tmp_path / "home")))
    plugins.reset()
    yield
    plugins.reset()
