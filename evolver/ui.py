"""The live progress display: iteration, phase, frontier with scores, elapsed time, tokens."""
from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.table import Table


class LiveStatus:
    def __init__(self, console: Console | None = None, enabled: bool = True):
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.live: Live | None = None
        self._last = 0.0
        self._last_line = ""

    def __enter__(self) -> "LiveStatus":
        if self.enabled:
            self.live = Live(console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def render(self, run) -> Table:
        table = Table.grid(padding=(0, 2))
        mins, secs = divmod(int(run.elapsed()), 60)
        table.add_row("[bold]run[/]", f"{run.id}   iteration {max(run.iteration, 0)}/{run.config.loop.iterations}"
                      f"   elapsed {mins}:{secs:02d}")
        table.add_row("[bold]now[/]", run.status or "")
        members = sorted(run.frontier.members, key=lambda m: -m.metrics.get("score", 0))
        table.add_row("[bold]frontier[/]", "  ".join(f"{m.program_id} {m.metrics.get('score', 0):.3f}"
                                                     f"/{m.metrics.get('context_tokens', 0):.0f}tok" for m in members)
                      or "(empty)")
        if run.tokens:
            table.add_row("[bold]tokens[/]", "  ".join(f"{k} {v}" for k, v in sorted(run.tokens.items())))
        return table

    def update(self, run) -> None:
        now = time.time()
        if self.live is not None:
            if now - self._last > 0.2:
                self.live.update(self.render(run))
                self._last = now
        else:
            # Not a terminal (CI, a pipe): print a plain line when the phase changes, at most every 10 s.
            line = f"[{int(run.elapsed())}s] {run.status}"
            head = run.status.split(" ")[0:3]
            if head != self._last_line.split(" ")[1:4] or now - self._last > 10:
                self.console.print(line, highlight=False)
                self._last, self._last_line = now, line
