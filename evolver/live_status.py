"""The live progress display: iteration, phase, frontier with scores, elapsed time, tokens, and the run's
scoreboard: the seed's dev score, then each evaluated candidate with its dev score as it is admitted or
discarded. The built-in ``on_candidate`` hook (:mod:`evolver.default_plugins`) feeds the scoreboard."""
from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

SEED_ID = "seed"  # evolver.seeding.SEED_ID (not imported: it pulls in the plugin manager and git)
# Candidates kept on screen, latest last: the display must stay small enough to remain visible.
SHOWN_ROWS = 8


class LiveStatus:
    def __init__(self, console: Console | None = None, enabled: bool = True):
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.live: Live | None = None
        self._last = 0.0
        self._last_line = ""
        self.seed_score: float | None = None
        self.scoreboard: list[tuple[str, str, float | None, str]] = []  # (id, operator, dev score, outcome)

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
        table.add_row("[bold]dev scores[/]", self.render_scoreboard(run))
        return table

    def render_scoreboard(self, run) -> Table:
        """The seed's dev score, then the latest evaluated candidates (admitted green, discarded dim)."""
        self._note_seed(run)
        table = Table.grid(padding=(0, 2))
        table.add_row(SEED_ID, "seed", "..." if self.seed_score is None else f"{self.seed_score:.3f}", "baseline")
        rows = self.scoreboard[-SHOWN_ROWS:]
        if len(self.scoreboard) > len(rows):
            table.add_row("[dim]...[/]", "", "", f"[dim]{len(self.scoreboard) - len(rows)} earlier[/]")
        for cid, operator, score, outcome in rows:
            shown = "probe" if score is None else f"{score:.3f}"  # None: stopped after the probe
            style = "green" if outcome == "admitted" else "dim"
            table.add_row(*(f"[{style}]{cell}[/]" for cell in (cid, operator, shown, outcome)))
        return table

    def on_candidate(self, run, candidate, outcome: str) -> None:
        """Put an admitted or discarded candidate on the scoreboard and redraw at once."""
        if outcome not in ("admitted", "discarded"):
            return
        score = (candidate.scores or {}).get("score")
        self.scoreboard = [row for row in self.scoreboard if row[0] != candidate.id]
        self.scoreboard.append((candidate.id, candidate.proposal.operator, score, outcome))
        if self.live is not None:  # without a terminal the loop's own log line says the same
            self.live.update(self.render(run))
            self._last = time.time()

    def _note_seed(self, run) -> None:
        """The seed's score, kept once seen: it may leave the frontier later."""
        if self.seed_score is None:
            seed = next((m for m in run.frontier.members if m.program_id == SEED_ID), None)
            if seed is not None:
                self.seed_score = seed.metrics.get("score")

    def update(self, run) -> None:
        now = time.time()
        self._note_seed(run)
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
