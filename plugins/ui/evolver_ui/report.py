"""The HTML report: one self-contained page (inline SVG and CSS, no script, no network) assembled from
:mod:`evolver_ui.data`'s rows, :mod:`evolver_ui.plots` and :mod:`evolver_ui.lineage`, through the
``templates/report.html`` Jinja template."""
from __future__ import annotations

from pathlib import Path

import jinja2
from markupsafe import Markup

from evolver import ReportContext
from evolver_ui import plots
from evolver_ui.data import SEED_ID, RunData, collect
from evolver_ui.lineage import lineage

#: Paired with a run's only objective on the frontier plot: what every harness costs.
SECOND_AXIS = ("context_tokens:min", "score:max")


def write_html(report: ReportContext) -> Path:
    """Write ``report.folder / f"{run_id}.html"`` and return its path."""
    path = Path(report.folder) / f"{report.run_id}.html"
    path.write_text(render(collect(report)))
    return path


def render(data: RunData) -> str:
    env = jinja2.Environment(loader=jinja2.PackageLoader("evolver_ui", "templates"), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True)
    return env.get_template("report.html").render(page(data))


def page(data: RunData) -> dict:
    """Everything the template shows: plots as SVG markup, tables as rows."""
    s = data.summary
    x, y = frontier_axes(data.objectives)
    train = plots.training(data.training, prefix=f"{data.run_id}-") if data.training else None
    return {
        "run_id": data.run_id, "summary": s, "test_rows": test_rows(s), "paired": paired_lines(s),
        "dev_svg": Markup(plots.dev_scores(dev_points(data), data.seed_dev,
                                           rejected=sum(c.dev is None for c in data.candidates))),
        "frontier_svg": Markup(plots.frontier(data.dev_metrics, data.members, x, y)), "axes": (x, y),
        "lineage_svg": Markup(lineage(lineage_nodes(data))),
        "categories_svg": Markup(plots.categories(category_series(s))) if category_series(s) else None,
        "training_svg": Markup(train) if train else None, "training_runs": sorted(data.training),
        "candidates": data.candidates, "diffs": [(c, diff_lines(text)) for c, text in data.diffs],
    }


def frontier_axes(objectives: list[str]) -> tuple[str, str]:
    """The first two objectives; a run with one gets a second from :data:`SECOND_AXIS`."""
    if len(objectives) >= 2:
        return objectives[0], objectives[1]
    names = [o.split(":")[0] for o in objectives]
    axes = objectives + [a for a in SECOND_AXIS if a.split(":")[0] not in names]
    return axes[0], axes[1]


def dev_points(data: RunData) -> list[dict]:
    return [{"id": c.id, "iteration": c.iteration, "score": c.dev,
             "status": "admitted" if c.status == "admitted" else "probe" if c.probe else "discarded"}
            for c in data.candidates if c.dev is not None]


def lineage_nodes(data: RunData) -> list[dict]:
    seed = {"id": SEED_ID, "parent": None, "status": "seed", "member": SEED_ID in data.members, "dev": data.seed_dev}
    return [seed] + [{"id": c.id, "parent": c.parent, "status": c.status, "member": c.id in data.members,
                      "operator": c.operator, "proposer": c.proposer, "dev": c.dev} for c in data.candidates]


def category_series(s: dict) -> dict[str, dict[str, float]]:
    """label -> category -> test score: the baseline, best-of-N, the best (when it is not the baseline)."""
    test, out = s.get("test") or {}, {}
    if s.get("baseline") in test:
        out[f"{s['baseline']} (baseline)"] = test[s["baseline"]].get("per_category") or {}
    bon = s.get("best_of_n") or {}
    if bon.get("test"):
        out[f"best of {bon['n']}"] = bon["test"].get("per_category") or {}
    if s.get("best") in test and s["best"] != s.get("baseline"):
        out[f"{s['best']} (best on dev)"] = test[s["best"]].get("per_category") or {}
    return {k: v for k, v in out.items() if v}


def hand_written(s: dict, pid: str) -> str:
    """The label of a program that carries skills written by hand for the benchmark (the summary's
    ``hand_written``), not learned."""
    return " (hand-written pack)" if pid in (s.get("hand_written") or {}) else ""


def test_rows(s: dict) -> list[dict]:
    rows = [{"program": pid + (" (baseline)" if pid == s.get("baseline") else " (best on dev)" if pid == s.get("best")
                               else "") + hand_written(s, pid), **m} for pid, m in (s.get("test") or {}).items()]
    bon = s.get("best_of_n")
    if bon and bon.get("test"):
        rows.append({"program": f"{bon['program']}{hand_written(s, bon['program'])}, best of {bon['n']} "
                                "(no evolution)", **bon["test"]})
    return rows


def paired_lines(s: dict) -> list[str]:
    """The run's paired comparisons on test as the core wrote them (each comparison's ``line``), with
    the gate's verdict."""
    return [f"{c['line']} Verdict: {c['verdict']}." if c.get("verdict") else c["line"]
            for c in (s.get("paired") or {}).values() if c.get("line")]


def diff_lines(text: str) -> list[tuple[str, str]]:
    """(css class, line) for a unified diff: added, removed, hunk headers, file headers, context."""
    def kind(line: str) -> str:
        if line.startswith(("+++", "---", "diff --git", "index ")):
            return "file"
        return {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "ctx")
    return [(kind(line), line) for line in text.splitlines()]
