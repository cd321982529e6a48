
import pytest
from click.testing import CliRunner

from evolver import plugins
from evolver.errors import PluginError, UnknownNameError

LOCAL = '''
from evolver.hookspecs import hookimpl
from evolver.benchmarks.basic import BasicBenchmark

class Tiny(BasicBenchmark):
    name = "tiny"

@hookimpl
def register_benchmarks(register):
    register("tiny", Tiny, "a local test benchmark")
'''


def test_builtins_are_registered_through_hooks():
    regs = plugins.registries()
    assert {"twx", "basic"} <= set(regs["benchmark"].names())
    assert {"transformers", "openai", "vllm", "scripted"} <= set(regs["backend"].names())
    assert {"round-robin", "best", "random", "ucb"} <= set(regs["selector"].names())
    assert "evoskill" in regs["proposer"].names()  # first-party plugin, found by its entry point
    assert plugins.get("backend", "scripted").plugin == "evolver.default_plugins"
    # the default run's engine and benchmark are first-party plugins, found by their entry points
    assert plugins.get("backend", "transformers").plugin == "transformers"
    assert plugins.get("benchmark", "twx").plugin == "twx" and plugins.get("backend", "vllm").plugin == "vllm"


def test_unknown_name_lists_known_ones():
    with pytest.raises(UnknownNameError) as err:
        plugins.get("benchmark", "nope")
    assert "twx" in str(err.value) and "basic" in str(err.value)


def test_local_plugin_file(tmp_path):
    path = tmp_path / "myplugin.py"
    path.write_text(LOCAL)
    plugins.load_local(path)
    assert plugins.get("benchmark", "tiny").description == "a local test benchmark"
    rows = {r["name"]: r for r in plugins.describe()}
    local = rows[f"local:{path.resolve()}"]
    assert local["hooks"] == ["register_benchmarks"] and local["provides"] == ["benchmark:tiny"]


def test_local_plugin_folder(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(LOCAL)
    plugins.load_local(pkg)
    assert "tiny" in plugins.registries()["benchmark"].names()


def test_broken_plugin_is_named(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import not_a_module_anywhere\n")
    with pytest.raises(PluginError, match="broken.py failed to import.*not_a_module_anywhere"):
        plugins.load_local(path)


def test_misspelled_hook_fails_loudly(tmp_path, monkeypatch):
    path = tmp_path / "typo.py"
    path.write_text("from evolver.hookspecs import hookimpl\n@hookimpl\ndef register_benchmark(register):\n    pass\n")
    monkeypatch.setenv("EVOLVER_PLUGIN_PATH", str(path))
    with pytest.raises(PluginError, match="unknown hook"):
        plugins.manager()


def test_duplicate_registration_names_both(tmp_path):
    path = tmp_path / "dup.py"
    path.write_text("from evolver.hookspecs import hookimpl\n@hookimpl\ndef register_benchmarks(register):\n"
                    "    register('basic', object)\n")
    plugins.load_local(path)
    with pytest.raises(PluginError, match="registered twice"):
        plugins.registries()


def test_trace_env_var_prints_hook_calls(monkeypatch, capsys):
    monkeypatch.setenv("EVOLVER_TRACE_PLUGINS", "1")
    plugins.registries()
    err = capsys.readouterr().err
    assert "[hook] register_benchmarks" in err and "evolver.default_plugins" in err


def test_plugins_command_lists_versions_and_hooks(tmp_path):
    from evolver.cli import cli

    path = tmp_path / "myplugin.py"
    path.write_text(LOCAL)
    result = CliRunner().invoke(cli, ["--plugin", str(path), "plugins"])
    assert result.exit_code == 0, result.output
    assert "evolver.default_plugins  [evolver " in result.output
    assert "evoskill  [evolver-evoskill 0.1.0]" in result.output
    assert "provides: benchmark:tiny" in result.output


def test_broken_plugin_via_cli_is_a_clean_error(tmp_path):
    from evolver.cli import cli

    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('boom')\n")
    result = CliRunner().invoke(cli, ["--plugin", str(path), "plugins"])
    assert result.exit_code == 2
    assert "broken.py failed to import" in result.output and "boom" in result.output


def test_every_hook_is_documented_with_its_exact_signature():
    import inspect
    from pathlib import Path

    from evolver import hookspecs

    doc = (Path(__file__).parents[1] / "docs" / "plugins.md").read_text()
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction):
        if hasattr(fn, "evolver_spec"):
            assert f"### `{name}{inspect.signature(fn)}`" in doc, f"docs/plugins.md lacks the hook {name}"


def test_a_misspelt_hook_in_a_plugin_file_is_named_with_the_right_one(tmp_path):
    path = tmp_path / "typo.py"
    path.write_text("from evolver.hookspecs import hookimpl\n@hookimpl\ndef on_episode_ends(run, episode):\n    pass\n")
    with pytest.raises(PluginError, match="'on_episode_ends' \\(did you mean 'on_episode_end'\\?\\)"):
        plugins.load_local(path)
    plugins.hook().on_run_start(run=None)  # the bad file was unloaded: the manager still works


def test_a_plugin_that_calls_sys_exit_is_an_error_not_an_exit(tmp_path):
    path = tmp_path / "quits.py"
    path.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(PluginError, match="quits.py failed to import.*SystemExit"):
        plugins.load_local(path)
    hooked = tmp_path / "quits_later.py"
    hooked.write_text("import sys\nfrom evolver.hookspecs import hookimpl\n"
                      "@hookimpl\ndef on_run_start(run):\n    sys.exit(4)\n")
    plugins.load_local(hooked)
    with pytest.raises(PluginError, match=r"sys.exit\(4\) in hook on_run_start \(implemented by local:.*quits_later"):
        plugins.hook().on_run_start(run=None)


def test_evolver_plugins_naming_nothing_installed_is_an_error(monkeypatch):
    monkeypatch.setenv("EVOLVER_PLUGINS", "evoskill,nosuch")
    plugins.reset()
    with pytest.raises(PluginError, match="EVOLVER_PLUGINS names 'nosuch', which is not installed; installed plugins: .*evoskill"):
        plugins.manager()


def test_config_names_and_plugin_options_are_checked_before_any_work():
    from evolver.config import load_config

    def check(*overrides):
        plugins.check_config(load_config(None, ['proposers=["evoskill"]', *overrides]))
    check()  # resolves (the suite loads only the evoskill plugin)
    with pytest.raises(UnknownNameError, match="unknown selector 'nope'"):
        check("loop.selector=nope")
    with pytest.raises(PluginError, match="options for unknown plugin 'evoskil' .*did you mean 'evoskill'"):
        check("plugins.evoskil.mode=x")
    with pytest.raises(PluginError, match="proposer 'evoskill': unknown option 'modee'; did you mean 'mode'"):
        plugins.make("proposer", "evoskill", run=None, modee="x")
