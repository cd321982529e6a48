"""Progress of long work, shown one way by every command: ``with progress("eval", total=40) as bar:
bar.update(12)``.

On a terminal (stderr a TTY, outside CI) it is a rich bar with the count, the rate, the elapsed time and
an ETA, left on screen when the work ends. Elsewhere (CI, a pipe, a log file) it is plain lines on
stderr, at most one every ``every`` seconds plus the last one, so a log stays readable. Inside another
live display (``evolver run``'s, or a bar already on screen) it prints plain lines too, which that
display shows above itself. ``evolver run`` keeps its own live display (:mod:`evolver.live_status`); eval,
train, the serve start-up and the embedded model's fetch use this.

The ETA is the rate since the first update (not since the start: episodes found in the cache arrive at
once and would flatter it) times what is left. (The module is not ``evolver.progress``: that would
shadow the public name ``evolver.progress``, this module's :func:`progress`.)
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Callable, Iterator

#: Plain lines: at most one every this many seconds (the last one always shows).
PLAIN_EVERY_S = 2.0

_live = False  # a bar of this module is on screen: another one nested in it prints plain lines


def _clock(seconds: float) -> str:
    s = int(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _amount(n: float, unit: str) -> str:
    if unit == "bytes":
        return f"{n / 1e6:.1f}"
    return f"{n:g}" if isinstance(n, float) and not n.is_integer() else str(int(n))


class Progress:
    """One piece of work's progress: :meth:`update` says how much is done (see :func:`progress`)."""

    def __init__(self, description: str, total: float | None, unit: str, write: Callable[[str], None] | None,
                 every: float, eta: bool = True, clock: Callable[[], float] = time.monotonic):
        self.description, self.total, self.unit, self.every, self.timed = description, total, unit, every, eta
        self.done: float = 0
        self.note = ""
        self._write, self._clock = write, clock
        self.started = clock()
        self._first: tuple[float, float] | None = None  # (time, done) of the first update: the rate's origin
        self._updated_at = self.started
        self._printed_at: float | None = None
        self._printed = ""
        self._bar = None  # (rich Progress, task id) on a terminal

    def update(self, done: float, total: float | None = None, note: str = "") -> None:
        """``done`` units of the work are finished, of ``total`` (None: as before, or not known);
        ``note`` is a short text shown after the count (a step's metrics, the current stage)."""
        now = self._clock()
        if self._first is None or done < self.done:  # a new start (a new total) resets the rate
            self._first = (now, done)
        if total is not None:
            self.total = total
        self.done, self.note, self._updated_at = done, note, now
        if self._bar is not None:
            bar, task = self._bar
            bar.update(task, completed=done, total=self.total, stats=self.stats(), note=note, refresh=True)
        elif self._printed_at is None or now - self._printed_at >= self.every or self.finished:
            self._print(now)

    @property
    def finished(self) -> bool:
        return self.total is not None and self.done >= self.total

    def rate(self) -> float | None:
        """Units per second from the first update to the latest, or None before there are two to go by."""
        if self._first is None or self._updated_at <= self._first[0] or self.done <= self._first[1]:
            return None
        return (self.done - self._first[1]) / (self._updated_at - self._first[0])

    def eta(self) -> float | None:
        """Seconds left at that rate, from the latest update (None: no total or no rate yet)."""
        rate = self.rate()
        if self.total is None or not rate:
            return None
        return max(self.total - self.done, 0) / rate

    def stats(self) -> str:
        """``12/40 episodes  ETA 1:10  0.34 episodes/s``: the count, then what is known of the rest."""
        unit = "MB" if self.unit == "bytes" else self.unit
        one = unit[:-1] if unit.endswith("s") and unit != "MB" else unit  # "1 step", "12.0s/step"
        count = _amount(self.done, self.unit) + ("" if self.total is None else f"/{_amount(self.total, self.unit)}")
        parts = [f"{count} {one if self.total is None and self.done == 1 else unit}".rstrip()]
        eta, rate = (self.eta(), self.rate()) if self.timed else (None, None)
        if eta is not None and not self.finished:
            parts.append(f"ETA {_clock(eta)}")
        if rate:
            parts.append(f"{rate / 1e6:.1f} MB/s" if self.unit == "bytes" else
                         f"{rate:.2f} {unit}/s" if rate >= 1 else f"{1 / rate:.1f}s/{one}")
        return "  ".join(parts)

    def line(self) -> str:
        """The plain line as of the latest update: ``eval: 12/40 episodes  ETA 1:10  0.34 episodes/s  [0:35]``
        (``[0:35]``: the time elapsed), then the note."""
        return "  ".join(p for p in (f"{self.description}: {self.stats()}",
                                     f"[{_clock(self._updated_at - self.started)}]",
                                     self.note) if p)

    def _print(self, now: float) -> None:
        line = self.line()
        if self._write is not None:
            self._write(line)
        else:  # looked up now: click's test runner and a live display replace sys.stderr
            print(line, file=sys.stderr, flush=True)
        self._printed_at, self._printed = now, line

    def _close(self) -> None:
        """The last line, if the throttle held it back (the bar's last frame stays on screen by itself)."""
        if self._bar is None and self._printed_at is not None and self._printed != self.line():
            self._print(self._clock())


def _on_terminal(console) -> bool:
    from rich.file_proxy import FileProxy

    if _live or isinstance(sys.stderr, FileProxy):  # inside a live display: it shows our lines above itself
        return False
    return console.is_terminal and not console.is_dumb_terminal


@contextlib.contextmanager
def progress(description: str, total: float | None = None, unit: str = "episodes", *,
             every: float = PLAIN_EVERY_S, eta: bool = True, console=None) -> Iterator[Progress]:
    """Show the progress of long work while the ``with`` block runs; yields a :class:`Progress` whose
    ``update(done, total=None, note="")`` reports it.

    :param description: what is being done, first on the bar or line (``eval``, ``train``).
    :param total: how many units the work has, when known (``update`` may set or change it).
    :param unit: what is counted (``episodes``, ``steps``, ``stages``); ``bytes`` shows megabytes.
    :param every: plain lines: at most one every this many seconds, plus the last (0: every update).
    :param eta: False: no rate and no ETA, for units that take unequal times (start-up stages).
    :param console: a :class:`rich.console.Console` to draw on (default: stderr's; outside CI a
        terminal gets the bar, anything else plain lines to its file).
    """
    global _live
    from rich.console import Console

    explicit = console is not None
    console = console or Console(stderr=True)
    bar = _on_terminal(console) and (explicit or not os.environ.get("CI"))
    write = None
    if not bar and explicit:
        def write(line: str) -> None:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    handle = Progress(description, total, unit, write, every, eta)
    if not bar:
        try:
            yield handle
        finally:
            handle._close()
        return
    from rich.progress import BarColumn, Progress as Bar, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = [SpinnerColumn(), TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
               TextColumn("{task.fields[stats]}", markup=False), TimeElapsedColumn(),
               TextColumn("{task.fields[note]}", markup=False)]  # notes hold brackets: no markup
    with Bar(*columns, console=console, transient=False, refresh_per_second=4) as shown:
        task = shown.add_task(description, total=total, stats=handle.stats(), note="")
        handle._bar = (shown, task)
        _live = True
        try:
            yield handle
        finally:
            _live = False
