"""Shared by every test, core and plugins alike (a conftest under tests/ would not reach plugins/*/tests)."""
import importlib.metadata
import os

import pytest

# Keep installed third-party plugins out of the tests; first-party ones are loaded explicitly, except
# evoskill and those that bring the default config's engine and benchmark (transformers, vllm, twx), which
# every test has, as a default install does (plugins/requirements.txt). Only installed ones are named: an
# EVOLVER_PLUGINS naming a missing plugin is an error.
_EVERY_TEST = ("evoskill", "transformers", "twx", "vllm")
_installed = {ep.name for ep in importlib.metadata.entry_points(group="evolver")}
os.environ.setdefault("EVOLVER_PLUGINS", ",".join(n for n in _EVERY_TEST if n in _installed))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Where neither bubblewrap nor unshare works, the sandbox falls back to audit hooks and refuses candidate
# code unless opted in; the tests opt in (their candidates are the tests' own), and skip what needs more.
os.environ.setdefault("EVOLVER_ALLOW_AUDIT_SANDBOX", "1")


@pytest.fixture(autouse=True)
def fresh_plugins(monkeypatch, tmp_path):
    from evolver import plugins

    monkeypatch.setenv("EVOLVER_HOME", os.environ.get("EVOLVER_HOME", str(tmp_path / "home")))
    plugins.reset()
    yield
    plugins.reset()
