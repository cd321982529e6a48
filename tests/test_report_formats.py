"""Report formats (hook ``register_report_formats``): `evolver report` writes every registered one from the
store, says which plugin brings HTML when none does, and names a format that failed."""
import json

import pytest
from click.testing import CliRunner

from evolver import plugins
from evolver.cli import cli
from evolver.store import Store

FORMATS = '''
from pathlib import Path
from evolver import hookimpl

def write_txt(report):
    path = Path(report.folder) / f"{report.run_id}.txt"
    path.write_text(f"{report.run_id} best {report.summary['best']} runs {len(report.store.proposals(report.run_id))}")
    return path

def broken(report):
    raise RuntimeError("boom")

@hookimpl
def register_report_formats(register):
    register("txt", write_txt, description="plain text")
    register("broken", broken)
'''


@pytest.fixture
def reports(tmp_path, monkeypatch):
    """A workspace whose store holds one run's Markdown and JSON reports."""
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store"
    (store / "reports").mkdir(parents=True)
    Store(store / "evolver.duckdb").close()
    (store / "reports" / "r1.md").write_text("# evolver run r1\n")
    (store / "reports" / "r1.json").write_text(json.dumps({"best": "p0001"}))
    return store


def test_without_a_format_plugin_the_report_is_markdown_and_names_the_plugin_for_html(reports, monkeypatch):
    monkeypatch.setenv("EVOLVER_PLUGINS", "")
    monkeypatch.setattr(plugins.importlib.metadata, "entry_points", lambda **_: [])  # a core-only install
    plugins.reset()
    r = CliRunner().invoke(cli, ["--store", str(reports), "report"])
    assert r.exit_code == 0 and "# evolver run r1" in r.output
    assert ("no HTML report: report_format 'html' comes with the evolver-ui plugin, which is not installed: "
            "pip install -e plugins/ui") in r.output
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda url, *a, **k: opened.append(url))
    r = CliRunner().invoke(cli, ["--store", str(reports), "report", "--open"])
    assert r.exit_code == 2 and "evolver-ui plugin" in r.output and not opened


def test_every_registered_format_is_written_and_a_failing_one_is_named(reports, tmp_path):
    plugin = tmp_path / "formats.py"
    plugin.write_text(FORMATS)
    r = CliRunner().invoke(cli, ["--plugin", str(plugin), "--store", str(reports), "report"])
    assert r.exit_code == 2 and "# evolver run r1" in r.output  # the Markdown first
    assert f"error: report format 'broken' (plugin local:{plugin}) failed: RuntimeError('boom')" in r.output
    assert (reports / "reports" / "r1.txt").read_text() == "r1 best p0001 runs 0"


def test_at_the_end_of_a_run_a_failing_format_is_logged_and_the_others_are_written(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import evolver.report

    plugin = tmp_path / "formats.py"
    plugin.write_text(FORMATS)
    plugins.load_local(plugin)
    monkeypatch.setattr(evolver.report, "render", lambda run, summary: "# evolver run r1\n")
    logged = []
    store = Store(tmp_path / "store" / "evolver.duckdb")
    run = SimpleNamespace(id="r1", config=SimpleNamespace(store=str(tmp_path / "store")), store=store, repo=None,
                          log=logged.append)
    try:
        md = evolver.report.write_report(run, {"best": "seed"})
    finally:
        store.close()
    assert md.read_text() == "# evolver run r1\n" and md.with_suffix(".txt").read_text() == "r1 best seed runs 0"
    assert logged == [f"report: report format 'broken' (plugin local:{plugin}) failed: RuntimeError('boom')"]
