"""Profiles: the default configuration comes from a plugin, so the core names no benchmark. An outside
author's plugin offers its own, and `evolver --profile NAME` (or its `default`) runs it."""
from pathlib import Path

import pytest
from click.testing import CliRunner

from evolver import plugins
from evolver.config import load_config
from evolver.errors import ConfigError, UnknownNameError

PROFILES = '''
from evolver import hookimpl

DEFAULT = """# my benchmark, the way its authors run it
benchmark = "basic"
benchmark_options = { categories = ["units"] }
[loop]
iterations = 1
dev_per_category = 7
"""


@hookimpl
def register_profiles(register):
    register("default", DEFAULT, "the author's default run")
    register("quick", lambda: DEFAULT.replace("dev_per_category = 7", "dev_per_category = 2"), "a quick one")
    register("broken", "[loop\\n", "not TOML")
'''


@pytest.fixture
def author(tmp_path, monkeypatch):
    """Only the core and one outside author's plugin that offers profiles (no installed plugin)."""
    monkeypatch.setenv("EVOLVER_PLUGINS", "")
    plugins.reset()
    path = tmp_path / "my_profiles.py"
    path.write_text(PROFILES)
    plugins.load_local(path)
    yield str(path)
    plugins.reset()


def test_without_a_config_file_the_default_profile_is_the_configuration(author, tmp_path):
    cfg = load_config(None)
    assert (cfg.benchmark, cfg.benchmark_options, cfg.loop.dev_per_category) == ("basic", {"categories": ["units"]}, 7)
    assert load_config(None, profile="quick").loop.dev_per_category == 2
    assert load_config(None, ["loop.dev_per_category=3"]).loop.dev_per_category == 3  # overrides hold
    path = tmp_path / "evolver.toml"
    path.write_text("[loop]\niterations = 5\n")
    assert load_config(path).loop.dev_per_category is None  # a file is the whole configuration: no profile under it
    both = load_config(path, profile="quick")  # a named profile goes under the file
    assert (both.loop.iterations, both.loop.dev_per_category) == (5, 2)
    with pytest.raises(UnknownNameError, match="unknown profile 'quik'.*did you mean 'quick'"):
        load_config(None, profile="quik")
    with pytest.raises(ConfigError, match="profile 'broken' .*not valid TOML"):
        load_config(None, profile="broken")


def test_with_no_profile_installed_the_core_defaults_name_no_benchmark_plugin(monkeypatch):
    monkeypatch.setenv("EVOLVER_PLUGINS", "")
    plugins.reset()
    try:
        cfg = load_config(None)
        assert (cfg.benchmark, cfg.benchmark_options) == ("basic", {})
    finally:
        plugins.reset()
    # Any text of the core or its shipped skills, comments and docstrings included, but the install
    # hints of the unknown-name error (the monitor learns the benchmarks' packages from the plugins).
    root = Path(__file__).resolve().parents[1]
    named = [f"{path.relative_to(root)}:{i}" for base in ("evolver", "skills") for path in (root / base).rglob("*")
             if path.is_file() and path.suffix in (".py", ".md", ".toml", ".json")
             and path != root / "evolver" / "plugins.py"
             for i, line in enumerate(path.read_text().splitlines(), 1) if "twx" in line.lower()]
    assert named == [], "core modules that name the twx benchmark"


def test_init_writes_the_profile_as_its_author_wrote_it(author, tmp_path, monkeypatch):
    from evolver.cli import cli

    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["--plugin", author, "--store", str(tmp_path / "store"), "init"])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "evolver.toml").read_text()
    assert text.startswith("# my benchmark, the way its authors run it") and "wrote evolver.toml (profile 'default')" in r.output
    r = CliRunner().invoke(cli, ["--plugin", author, "--profile", "quick", "--config", "quick.toml",
                                 "--store", str(tmp_path / "store"), "init"])
    assert r.exit_code == 0, r.output
    assert "dev_per_category = 2" in (tmp_path / "quick.toml").read_text()
