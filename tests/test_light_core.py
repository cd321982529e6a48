"""A light core (issue 24): the core needs no torch, runs the basic benchmark against an OpenAI-compatible
server with no plugin at all, and, without its plugins, says which plugin brings the default run's names."""
from __future__ import annotations

import importlib.metadata
import os
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from evolver import plugins
from evolver.config import ROLES, check_config, load_config
from evolver.errors import UnknownNameError

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "accelerate", "gguf", "safetensors", "textworld_express", "py4j",
         "matplotlib")  # matplotlib: the HTML report's plots live in plugins/ui


def test_the_core_declares_no_engine_or_twx():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip().lower() for d in deps}
    assert not names & {"torch", "transformers", "accelerate", "gguf", "safetensors", "textworld-express"}, names


def test_the_core_imports_no_torch():
    """Every core module and every public name loads without an engine (evolver.cli, loop, store, evaluate,
    report among them), as do the registries with no plugin or with the first-party engine and twx
    plugins loaded (their entry points import torch only when a backend is built)."""
    code = ("import importlib, pkgutil, sys\nimport evolver\n"
            "names = [m.name for m in pkgutil.walk_packages(evolver.__path__, 'evolver.') if m.name != 'evolver.__main__']\n"
            "assert {'evolver.cli', 'evolver.loop', 'evolver.store', 'evolver.evaluate', 'evolver.report'} <= set(names)\n"
            "for name in names: importlib.import_module(name)\n"
            "for name in evolver.__all__: getattr(evolver, name)\n"
            "from evolver import plugins\nplugins.registries()\n"
            f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\nassert not heavy, heavy\n")
    installed = {ep.name for ep in importlib.metadata.entry_points(group="evolver")}
    for allowed in ("", ",".join(n for n in ("transformers", "twx", "vllm") if n in installed)):
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                       env={**os.environ, "EVOLVER_PLUGINS": allowed})


def test_without_plugins_the_default_run_names_the_plugins_to_install(tmp_path, monkeypatch):
    from evolver.cli import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVOLVER_PLUGINS", "")
    monkeypatch.setattr(plugins.importlib.metadata, "entry_points", lambda **_: [])  # a core-only install
    plugins.reset()
    cfg = load_config(None, [])  # no profile installed: the core's own defaults, which name no benchmark plugin
    assert (cfg.benchmark, cfg.benchmark_options) == ("basic", {})
    with pytest.raises(UnknownNameError) as err:
        check_config(cfg)
    msg = str(err.value)
    assert msg.startswith("unknown backend 'transformers'; known backends: "), msg
    assert "comes with the evolver-transformers plugin, which is not installed: pip install -e plugins/transformers" in msg
    assert "pip install -r plugins/requirements.txt" in msg
    assert "Also unknown: proposer 'skill-miner' (evolver-experience)" in msg
    with pytest.raises(UnknownNameError, match="profile 'default' comes with the evolver-twx plugin"):
        load_config(None, [], profile="default")
    with pytest.raises(UnknownNameError, match="backend 'transformers' comes with the evolver-transformers plugin, "
                                               "which is not installed: pip install -e plugins/transformers"):
        plugins.make("backend", "transformers")
    result = CliRunner().invoke(cli, ["--store", str(tmp_path / "store"), "run"])  # stops before playing
    assert result.exit_code == 2 and "error: unknown backend 'transformers'" in result.output, result.output
    assert "pip install -e plugins/transformers" in result.output
    assert "proposer 'skill-miner' (evolver-experience)" in result.output


def test_an_installed_plugin_left_out_by_evolver_plugins_is_named_so(monkeypatch):
    if "transformers" not in {ep.name for ep in importlib.metadata.entry_points(group="evolver")}:
        pytest.skip("the transformers plugin is not installed")
    monkeypatch.setenv("EVOLVER_PLUGINS", "")
    plugins.reset()
    with pytest.raises(UnknownNameError, match="comes with the installed plugin 'transformers', which is not "
                                               "loaded: EVOLVER_PLUGINS='' leaves it out"):
        plugins.get("backend", "transformers")


def test_with_no_plugin_a_run_on_basic_with_openai_roles_gets_as_far_as_the_server(tmp_path, monkeypatch):
    from evolver.cli import cli

    monkeypatch.setenv("EVOLVER_PLUGINS", "")
    monkeypatch.chdir(tmp_path)
    plugins.reset()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    roles = [f"--set=roles.{r}.{key}" for r in ROLES
             for key in ("backend=openai", "model=m", f'options={{base_url="{url}", max_retries=0, timeout_s=2}}')]
    result = CliRunner().invoke(cli, ["--store", str(tmp_path / "store"), "--set=benchmark=basic",
                                      "--set=benchmark_options={}", "--set=proposers=[]", *roles,
                                      "run", "--iterations", "1"])
    assert result.exit_code == 2, result.output
    assert "error: " in result.output and url.split("//")[1].split("/")[0] in result.output, result.output
