
import sys
from pathlib import Path

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


def test_a_plugin_missing_a_dependency_at_build_time_says_what_to_install(tmp_path):
    path = tmp_path / "lazy.py"
    path.write_text("from evolver import hookimpl\n\nclass Lazy:\n    def __init__(self, run=None, **_):\n"
                    "        import not_installed_anywhere  # noqa\n\n@hookimpl\ndef register_proposers(register):\n"
                    "    register('lazy', Lazy)\n")
    plugins.load_local(path)
    with pytest.raises(PluginError, match="proposer 'lazy' cannot be built: it needs 'not_installed_anywhere'.*"
                                          "plugins/requirements.txt"):
        plugins.make("proposer", "lazy", run=None)


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
    assert "    provides:\n      benchmark:tiny  a local test benchmark\n" in result.output  # name, then description
    assert "proposer:evoskill  failure traces -> create/edit one skill" in result.output


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
    from evolver.config import check_config, load_config

    def check(*overrides):
        check_config(load_config(None, ['proposers=["evoskill"]', *overrides]))
    check()  # resolves (the suite loads only the evoskill plugin)
    with pytest.raises(UnknownNameError, match="unknown selector 'nope'"):
        check("loop.selector=nope")
    with pytest.raises(PluginError, match="options for unknown plugin 'evoskil' .*did you mean 'evoskill'"):
        check("plugins.evoskil.mode=x")
    with pytest.raises(PluginError, match="proposer 'evoskill': unknown option 'modee'; did you mean 'mode'"):
        plugins.make("proposer", "evoskill", run=None, modee="x")


def test_a_plugin_folder_is_a_package_and_only_its_hook_modules_are_loaded(tmp_path, monkeypatch):
    folder = tmp_path / "myplugins"
    folder.mkdir()
    (folder / "tiny_helper_29.py").write_text("from evolver.benchmarks.basic import BasicBenchmark\n"
                                              "class Tiny(BasicBenchmark):\n    name = 'tiny'\n")
    (folder / "tiny_plugin_29.py").write_text(
        "from evolver import hookimpl\nfrom tiny_helper_29 import Tiny  # a sibling module\n\n"
        "@hookimpl\ndef register_benchmarks(register):\n    register('tiny', Tiny, 'a local test benchmark')\n")
    marker = tmp_path / "stray-ran"
    (folder / "stray_script.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit('stray script ran')\n")
    (folder / "mentions_only.py").write_text("# says hookimpl in a comment, implements nothing\nX = 1\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    plugins.load_local(folder)
    assert plugins.get("benchmark", "tiny").factory.__name__ == "Tiny"
    assert str(folder) in sys.path
    assert not marker.exists()  # the stray script was never run
    names = [name for name, _ in plugins.manager().list_name_plugin()]
    assert f"local:{folder / 'tiny_plugin_29.py'}" in names
    assert not any("stray_script" in n or "mentions_only" in n or "tiny_helper" in n for n in names)


def test_a_plugin_package_imports_its_own_modules(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg29"
    pkg.mkdir()
    (pkg / "helper.py").write_text("DESCRIPTION = 'from a helper module'\n")
    (pkg / "__init__.py").write_text(
        "from evolver import hookimpl\nfrom pkg29.helper import DESCRIPTION\nfrom . import helper\n\n"
        "@hookimpl\ndef register_selectors(register):\n    register('first', lambda: None, helper.DESCRIPTION)\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    plugins.load_local(pkg)
    assert plugins.get("selector", "first").description == "from a helper module"


def test_a_plugin_folder_without_hooks_is_an_error(tmp_path):
    (tmp_path / "script.py").write_text("raise SystemExit('must not run')\n")
    with pytest.raises(PluginError, match="no module that defines hook implementations"):
        plugins.load_local(tmp_path)


def test_an_unknown_benchmark_says_how_to_add_one(monkeypatch):
    with pytest.raises(UnknownNameError) as err:
        plugins.get("benchmark", "bsaic")
    said = str(err.value)
    assert "known benchmarks: basic, twx" in said and "did you mean 'basic'?" in said
    assert "evolver --plugin FILE|FOLDER" in said and "EVOLVER_PLUGIN_PATH" in said
    assert "installed plugins (entry points in group 'evolver'): " in said and "evoskill" in said
    import importlib.metadata
    import os

    loaded = set(os.environ["EVOLVER_PLUGINS"].split(","))
    left_out = sorted({ep.name for ep in importlib.metadata.entry_points(group="evolver")} - loaded)
    if left_out:  # installed, but EVOLVER_PLUGINS (the suite's conftest) does not load them
        assert f"leaves out {', '.join(left_out)})" in said
    # a first-party name keeps its install hint
    monkeypatch.setenv("EVOLVER_PLUGINS", "evoskill")
    plugins.reset()
    with pytest.raises(UnknownNameError, match="comes with the installed plugin 'twx', which is not loaded"):
        plugins.get("benchmark", "twx")


def test_benchmark_options_are_checked_before_any_work():
    from evolver.config import check_config, load_config

    def check(*overrides):
        check_config(load_config(None, ['proposers=["evoskill"]', "roles.executor.backend=scripted",
                                                *overrides]))
    check("benchmark_options.max_steps=3", "benchmark_options.games=[\"twc\"]")
    with pytest.raises(PluginError, match=r"benchmark 'twx': unknown option 'max_stepz' \(benchmark_options.max_stepz\); "
                                          r"did you mean 'max_steps'\?. Its options: suite, games, max_steps, jvm_pool"):
        check("benchmark_options.max_stepz=3")
    doc = " ".join((Path(__file__).parents[1] / "docs" / "plugins.md").read_text().split())
    with pytest.raises(PluginError) as err:
        check("benchmark_options.max_stepz=3")
    assert str(err.value).split(". Its")[0] in doc  # docs/plugins.md quotes the message as it is
    check("benchmark=basic", "benchmark_options.categories=[\"units\"]")
    with pytest.raises(PluginError, match="benchmark 'basic': unknown option 'categorys'.*did you mean 'categories'"):
        check("benchmark=basic", "benchmark_options.categorys=[\"units\"]")
    with pytest.raises(PluginError, match="unknown option 'suite'"):  # set by the user for basic: refused
        check("benchmark=basic", "benchmark_options.suite=twx-easy")
    with pytest.raises(PluginError, match="benchmark 'basic': unknown option 'max_steps'"):
        plugins.make("benchmark", "basic", max_steps=3)  # built directly, the same check


def test_the_registered_basic_factory_declares_the_benchmarks_own_options():
    import inspect

    from evolver.benchmarks.basic import BasicBenchmark

    assert plugins.declared_options(plugins.get("benchmark", "basic").factory) == \
        list(inspect.signature(BasicBenchmark).parameters)
    assert plugins.declared_options(lambda **options: None) is None  # **options: any option goes


def test_listing_plugins_imports_no_torch():
    import subprocess

    code = ("import sys; from evolver import plugins; plugins.describe(); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    env = {**__import__("os").environ, "EVOLVER_PLUGINS": "evoskill,transformers,twx,vllm,grpo,skillrl,experience"}
    installed = {ep.name for ep in __import__("importlib.metadata").metadata.entry_points(group="evolver")}
    env["EVOLVER_PLUGINS"] = ",".join(n for n in env["EVOLVER_PLUGINS"].split(",") if n in installed)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "[]"


def test_a_benchmark_factory_that_takes_any_option_is_warned_of_one_it_does_not_name(tmp_path):
    plugin = tmp_path / "loose.py"
    plugin.write_text(
        "from evolver import hookimpl\n"
        "from evolver.benchmarks.basic import BasicBenchmark\n"
        "def loose(suite='easy', **extra):\n"
        "    return BasicBenchmark()\n"
        "@hookimpl\n"
        "def register_benchmarks(register):\n"
        "    register('loose', loose)\n")
    plugins.load_local(plugin)
    with pytest.warns(UserWarning, match=r"'loose' takes any option \(\*\*kwargs\) and names none of these: "
                                         r"'sute' \(did you mean 'suite'\?\)"):
        plugins.make("benchmark", "loose", sute="hard")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plugins.make("benchmark", "loose", suite="hard")  # a named option: no warning
