"""The ``evolver ui`` command (hook ``register_commands``). The server's modules load when it runs, so the
command costs ``evolver --help`` nothing."""
from __future__ import annotations

from pathlib import Path

import click


@click.command(name="ui")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; one other than loopback needs --allow-remote.")
@click.option("--port", default=8765, show_default=True, type=int, help="Port to listen on.")
@click.option("--allow-remote", is_flag=True,
              help="Serve on a non-loopback address (the pages show whole traces and have no login).")
@click.option("--refresh", "max_age_s", default=5.0, show_default=True, type=float, metavar="SECONDS",
              help="How old the ui's copy of the store may grow before a page copies it again.")
@click.option("--open", "open_browser", is_flag=True, help="Open the runs page in the browser.")
@click.pass_obj
def ui_command(obj, host, port, allow_remote, max_age_s, open_browser):
    """Browse the workspace in a browser: runs, programs, diffs, skill histories, episode traces, and a
    running run's live state. Read-only; it reads a copy of the store, so a run keeps writing."""
    from evolver_ui.server import serve

    workspace = Path(obj.config().store)
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/"
    click.echo(f"evolver ui: {url} (the workspace {workspace.resolve()}; Ctrl-C stops it)", err=True)
    if open_browser:
        import threading
        import webbrowser

        threading.Timer(1.0, webbrowser.open, [url]).start()
    serve(workspace, host=host, port=port, allow_remote=allow_remote, max_age_s=max_age_s, log_level="warning")
