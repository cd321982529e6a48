"""The HTML report: written when a run finishes and by `evolver report`, every section there, the plots
real SVG with data, admitted programs highlighted, no network, training curves only for a run that trained."""
import json
import re
import shutil
from html import escape as html_escape
from pathlib import Path

import pytest
from click.testing import CliRunner

from evolver import Store
from evolver.cli import cli

#: The only URLs the page may hold: SVG's namespace names, which no browser fetches.
NAMESPACES = {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


def svg(html: str, name: str) -> str:
    found = re.search(rf'<svg class="plot" data-plot="{name}" .*?</svg>', html, flags=re.S)
    assert found, f"no {name} plot"
    return found.group(0)


def group(svg_text: str, gid: str) -> str:
    """The SVG group matplotlib wrote for the artist with this gid."""
    start = svg_text.index(f'<g id="{gid}">')
    return svg_text[start:svg_text.index("</g>", start)]


def report(store: Path, *args: str):
    return CliRunner().invoke(cli, ["--store", str(store), "report", *args], catch_exceptions=False)


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no evolver.toml from elsewhere


def test_a_finished_run_writes_a_self_contained_html_report(finished_run):
    store, run_id = finished_run
    html = (store / "reports" / f"{run_id}.html").read_text()  # written when the run finished
    for section in ("test", "dev", "frontier", "lineage", "categories", "candidates", "diffs"):
        assert f'<section id="{section}">' in html, section
    assert '<section id="training">' not in html  # the run trained nothing
    # the paired comparison as the core wrote it (the Markdown report's line), with the gate's verdict
    import duckdb

    with duckdb.connect(str(store / "evolver.duckdb"), read_only=True) as db:
        summary = json.loads(db.execute("SELECT summary FROM runs WHERE run_id = ?", [run_id]).fetchone()[0])
    line = summary["paired"]["best_vs_seed"]["line"]
    assert line.startswith("Best vs seed on test: ") and line in (store / "reports" / f"{run_id}.md").read_text()
    assert html_escape(f"{line} Verdict: {summary['paired']['best_vs_seed']['verdict']}.") in html
    # every plot holds drawn data: markers (<use> of a marker path), bars and patches (<path>)
    assert "<use " in group(svg(html, "dev-scores"), "dev-admitted")
    assert "<use " in group(svg(html, "dev-scores"), "dev-probe")
    frontier = svg(html, "frontier")
    assert group(frontier, "frontier-members").count("<use ") == 2  # seed and p0001
    assert "<path " in group(frontier, "frontier-dominated")
    assert svg(html, "categories").count("<path ") >= 6  # 3 programs x 2 categories
    lineage = svg(html, "lineage")
    assert "p0001" in group(lineage, "lineage-admitted-p0001")  # admitted: highlighted
    assert "#dafbe1" in group(lineage, "lineage-admitted-p0001")
    assert 'id="lineage-discarded-p0002"' in lineage and 'id="lineage-rejected-p0003"' in lineage
    assert "create · toggler" in lineage  # operator and proposer on the edge
    # the admitted program's diff, lines marked
    assert '<span class="add">+name: shout-words</span>' in html and 'id="diff-p0001"' in html
    assert 'id="diff-p0002"' not in html
    # self-contained: nothing to fetch
    assert set(re.findall(r"https?://[^\s\"'<>)]+", html)) <= NAMESPACES
    assert not re.search(r"<script|<link|<img|<iframe|@import|src=", html, flags=re.I)
    assert set(re.findall(r"url\((.)", html)) == {"#"}  # clip paths: references inside the page
    assert {h[0] for h in re.findall(r'href="([^"]*)"', html)} == {"#"}  # links and markers: in the page too


def test_evolver_report_writes_the_html_again_and_opens_it(finished_run, monkeypatch):
    store, run_id = finished_run
    html = store / "reports" / f"{run_id}.html"
    html.unlink()
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda url, *a, **k: opened.append(url) or True)
    r = report(store, "--open")
    assert r.exit_code == 0, r.output
    assert f"# evolver run {run_id}" in r.output and f"html: {html}" in r.output
    assert html.exists() and opened == [html.resolve().as_uri()]


def test_the_training_curves_appear_when_the_run_trained(finished_run, tmp_path):
    store, run_id = finished_run
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    db = Store(copy / "evolver.duckdb")
    try:
        db.add_train_steps(f"{run_id}-imitation-it0", [{"step": s, "loss": 2.0 / s} for s in (1, 2, 3)])
        db.add_train_steps(f"{run_id}-grpo-it1", [{"step": s, "reward_mean": 0.1 * s, "reward_std": 0.05,
                                                   "kl": 0.01 * s, "clip_frac": 0.2, "loss": 0.3} for s in (1, 2)])
        db.add_train_steps("another-run-grpo-it1", [{"step": 1, "reward_mean": 9.0}])  # not this run's
    finally:
        db.close()
    r = report(copy)
    assert r.exit_code == 0, r.output
    html = (copy / "reports" / f"{run_id}.html").read_text()
    assert '<section id="training">' in html and f"{run_id}-imitation-it0" in html and "another-run" not in html
    training = svg(html, "training")
    for title in ("SFT loss", "GRPO reward (mean ± std)", "GRPO KL", "GRPO clip fraction"):
        assert title in training
    for key in ("loss", "reward_mean", "kl", "clip_frac"):
        assert "<path " in group(training, f"train-{key}"), key


def test_the_frontier_plot_takes_the_first_two_objectives_or_adds_context_tokens():
    from evolver_ui.report import frontier_axes

    assert frontier_axes(["score:max", "cost:min", "context_tokens:min"]) == ("score:max", "cost:min")
    assert frontier_axes(["score:max"]) == ("score:max", "context_tokens:min")
    assert frontier_axes(["context_tokens:min"]) == ("context_tokens:min", "score:max")


def test_programs_that_carry_a_hand_written_skill_are_labelled():
    from evolver_ui.report import test_rows

    m = {"score": 1.0, "success": 1.0, "context_tokens": 10, "cost": 20}
    s = {"test": {"seed": m, "p0001": m}, "baseline": "seed", "best": "p0001", "hand_written": {"seed": ["x-rule"]},
         "best_of_n": {"program": "seed", "n": 2, "test": m}}
    assert [r["program"] for r in test_rows(s)] == ["seed (baseline) (hand-written pack)", "p0001 (best on dev)",
                                                    "seed (hand-written pack), best of 2 (no evolution)"]


def test_the_lineage_layout_puts_children_one_column_right_and_survives_orphans():
    from evolver_ui.lineage import layout

    nodes = [{"id": "seed", "parent": None}, {"id": "a", "parent": "seed"}, {"id": "b", "parent": "seed"},
             {"id": "c", "parent": "a"}, {"id": "x", "parent": "gone"}]
    assert layout(nodes) == {"seed": (0, 0), "a": (1, 0), "c": (2, 0), "b": (1, 1), "x": (0, 2)}
