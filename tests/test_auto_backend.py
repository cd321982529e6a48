"""The default backend ``auto``: vllm where its plugin and a GPU are, else transformers."""
from __future__ import annotations

import pytest

from evolver import plugins
from evolver.backends import auto
from evolver.config import Config, check_config


def _with_vllm(monkeypatch, registered: bool):
    entries = dict(plugins.registries()["backend"].entries)
    if registered:
        entries.setdefault("vllm", plugins.Entry("vllm", lambda **o: None))
    else:
        entries.pop("vllm", None)
    monkeypatch.setattr(plugins.registries()["backend"], "entries", entries)


@pytest.mark.parametrize("registered,cuda,expected", [(True, True, "vllm"), (True, False, "transformers"),
                                                      (False, True, "transformers"), (False, False, "transformers")])
def test_auto_picks_vllm_only_with_its_plugin_and_a_gpu(monkeypatch, registered, cuda, expected):
    _with_vllm(monkeypatch, registered)
    monkeypatch.setattr(auto, "_cuda", lambda: cuda)
    assert auto.local_engine() == expected


def test_auto_is_every_roles_default_and_builds_the_engine_it_picks(monkeypatch):
    cfg = Config()
    assert {cfg.role(r).backend for r in ("executor", "proposer", "builder", "judge")} == {"auto"}
    monkeypatch.setattr(auto, "local_engine", lambda: "scripted")
    backend = plugins.make("backend", "auto", rule="look")
    assert backend.name == "scripted"


def test_check_config_names_the_engine_auto_stands_for_when_it_is_missing(monkeypatch):
    monkeypatch.setattr(auto, "local_engine", lambda: "no-such-engine")
    cfg = Config(benchmark="basic", benchmark_options={}, proposers=[])
    with pytest.raises(plugins.UnknownNameError, match="no-such-engine"):
        check_config(cfg)
