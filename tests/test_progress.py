"""Long work's progress (evolver.progressbar): a bar with an ETA on a terminal, throttled plain lines elsewhere."""
from __future__ import annotations

import io

from rich.console import Console

from evolver import progress
from evolver.progressbar import Progress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_are_throttled_and_the_last_always_shows():
    clock, lines = Clock(), []
    bar = Progress("eval", 20, "episodes", lines.append, every=2.0, clock=clock)
    for done in range(21):  # one episode every 0.5 s: a line every 2 s (4 episodes), and the last
        bar.update(done)
        clock.now += 0.5
    assert lines == [f"eval: {d}/20 episodes" + ("  ETA " + eta if eta else "") + rate + f"  [{t}]"
                     for d, eta, rate, t in [(0, "", "", "0:00"), (4, "0:08", "  2.00 episodes/s", "0:02"),
                                             (8, "0:06", "  2.00 episodes/s", "0:04"),
                                             (12, "0:04", "  2.00 episodes/s", "0:06"),
                                             (16, "0:02", "  2.00 episodes/s", "0:08"),
                                             (20, "", "  2.00 episodes/s", "0:10")]]


def test_the_rate_starts_at_the_first_update_and_slow_work_reads_seconds_each():
    clock, lines = Clock(), []
    bar = Progress("grpo", None, "steps", lines.append, every=2.0, clock=clock)
    clock.now += 30  # set-up before the first step: not part of the rate
    bar.update(1, total=4, note="loss 0.5")
    clock.now += 12
    bar.update(2, note="loss 0.4")
    assert lines == ["grpo: 1/4 steps  [0:30]  loss 0.5",
                     "grpo: 2/4 steps  ETA 0:24  12.0s/step  [0:42]  loss 0.4"]


def test_a_line_the_throttle_held_back_shows_when_the_work_ends():
    clock, lines = Clock(), []
    bar = Progress("fetch", None, "bytes", lines.append, every=2.0, clock=clock)
    bar.update(1_000_000)
    clock.now += 1
    bar.update(2_500_000)  # within 2 s of the first line, and no total to say it is the last: held back
    assert lines == ["fetch: 1.0 MB  [0:00]"]
    bar._close()  # what the context manager does when the work ends
    assert lines == ["fetch: 1.0 MB  [0:00]", "fetch: 2.5 MB  1.5 MB/s  [0:01]"]
    bar._close()
    assert len(lines) == 2  # never twice


def test_without_a_terminal_the_console_gets_plain_lines():
    out = io.StringIO()
    with progress("eval", total=3, console=Console(file=out, width=200), every=0) as bar:
        for done in range(4):
            bar.update(done, note="stage")
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and lines[0] == "eval: 0/3 episodes  [0:00]  stage" and lines[-1].startswith("eval: 3/3 ")
    assert "\x1b" not in out.getvalue()


def test_a_terminal_gets_a_bar_with_count_rate_and_eta():
    out = io.StringIO()
    with progress("eval", total=4, console=Console(file=out, force_terminal=True, width=150)) as bar:
        for done in range(5):
            bar.update(done, note="going")
    shown = out.getvalue()
    assert "━" in shown and "eval" in shown and "4/4 episodes" in shown and "going" in shown
    assert "3/4 episodes  ETA 0:00" in shown and "episodes/s" in shown  # a frame before the end has the ETA
    assert not shown.rstrip().endswith("\x1b[2K")  # transient=False: the last frame stays on screen


def test_progress_inside_a_bar_prints_lines_above_it_instead_of_a_second_bar():
    out = io.StringIO()
    with progress("serve start-up", total=2, unit="stages", console=Console(file=out, force_terminal=True)) as outer:
        outer.update(0, note="loading the model")
        with progress("fetch", total=10_000_000, unit="bytes") as inner:  # the model fetch, nested
            inner.update(10_000_000)
        assert inner._bar is None
        outer.update(2, note="ready")
    assert "\x1b[2Kfetch: 10.0/10.0 MB  [0:00]\n" in out.getvalue()  # a plain line, above the bar
