"""Views of evolver runs: the HTML report, written beside the Markdown one when a run finishes and by
``evolver report`` (``--open`` opens it), a self-contained page (plots are inline SVG, no network); and
``evolver ui``, a read-only server of the whole workspace (:mod:`evolver_ui.server`).

Modules: :mod:`evolver_ui.data` reads a run from the store into plain rows, :mod:`evolver_ui.plots` and
:mod:`evolver_ui.lineage` draw them (each returns an SVG string), :mod:`evolver_ui.report` assembles the page.
Importing this package imports no plotting library: the format's writer loads them when called.
"""
from __future__ import annotations

from evolver import hookimpl

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []


def write_html(report):
    """The ``html`` report format: ``store/reports/RUN.html``."""
    from evolver_ui.report import write_html as write

    return write(report)


@hookimpl
def register_report_formats(register):
    register("html", write_html, description="a self-contained HTML report: dev scores over the iterations, "
             "the frontier, the lineage, per-category test scores, training curves, each admitted diff")


@hookimpl
def register_commands(cli):
    from evolver_ui.command import ui_command

    cli.add_command(ui_command)
