"""Experiment trackers for evolver runs: ``[plugins.tracking] report_to = ["tensorboard", "mlflow", "wandb",
"trackio"]``, on the run's event hooks.

What a run reports (one tracker run per evolver run; its training runs ``RUN-<operator>-it<N>`` report into it):

- at the start (``on_run_start``): the run's config;
- after each iteration (``on_iteration_end``, step = the iteration): ``iteration/train_score``,
  ``iteration/failures``, ``iteration/candidates``, ``iteration/admitted``, how many candidates reached each
  outcome (``candidates/proposed``, ``.../rejected``, ``.../evaluated``, ``.../discarded``, ``.../admitted``,
  from ``on_candidate``), ``candidates/best_dev_score``, ``frontier/size`` and the best member's dev metrics
  (``frontier/best_score``, ...); and the candidates' outcomes with their reasons as text (``candidates``);
- every training step (``on_train_step``): its numeric metrics as ``train/<operator>-it<N>/<metric>`` (inside
  a loop run) or ``train/<metric>`` (``evolver train``), nested ones joined with ``/``;
- at the end (``on_run_end``, step = the number of iterations): the test metrics ``test/<program>/<metric>``
  (``test/best/...`` for the best program, ``test/best-of-n/...``), and the report's files
  (``store/reports/RUN.md``, ``.json``, ``.html``) as the artifact ``report``.

A tracker named but not installed stops the run at its start with the pip command. A tracker that fails
later is logged once and dropped: the run goes on, and the store has everything anyway.
"""
from __future__ import annotations

import atexit
from collections import Counter
from pathlib import Path

from evolver import hookimpl

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []

from .options import load_options
from .trackers import numbers, open_tracker

OUTCOMES = ("proposed", "rejected", "evaluated", "discarded", "admitted")

#: evolver run id -> its open session (a run's training runs share it).
_sessions: dict[str, "Session"] = {}


class Session:
    """The trackers of one evolver run and what the current iteration has gathered for them."""

    def __init__(self, run, options):
        log_dir = Path(options.log_dir or "tracking")
        log_dir = log_dir if log_dir.is_absolute() else Path(run.workspace) / log_dir
        self.log = run.log
        self.trackers = []
        try:
            for name in dict.fromkeys(options.report_to):
                self.trackers.append(open_tracker(name, log_dir, options, run.id, bool(run.resumed)))
        except BaseException:
            self.close()
            raise
        self.each("params", run.config.model_dump(mode="json", fallback=repr))
        self.new_iteration()

    def new_iteration(self) -> None:
        self.outcomes: Counter = Counter()
        self.lines: list[str] = []
        self.dev_scores: list[float] = []

    def each(self, call: str, *args) -> None:
        """``tracker.call(*args)`` on every tracker; one that fails is logged and dropped."""
        for tracker in list(self.trackers):
            try:
                getattr(tracker, call)(*args)
            except Exception as exc:  # a tracker (a server, a full disk) never stops the run
                self.log(f"tracking: {tracker.name} failed in {call} ({exc!r}); nothing more goes to it")
                self.trackers.remove(tracker)
                try:
                    tracker.close()
                except Exception:
                    pass

    def close(self) -> None:
        for tracker in self.trackers:
            try:
                tracker.close()
            except Exception as exc:
                self.log(f"tracking: {tracker.name} failed to finish ({exc!r})")
        self.trackers = []


def _open(run) -> Session | None:
    options = load_options((run.config.plugins or {}).get("tracking"))
    if not options.report_to:
        return None
    stale = _sessions.pop(run.id, None)
    if stale is not None:
        stale.close()
    _sessions[run.id] = session = Session(run, options)
    return session


@hookimpl
def on_run_start(run):
    _open(run)


@hookimpl
def on_candidate(run, candidate, outcome):
    session = _sessions.get(run.id)
    if session is None:
        return
    session.outcomes[outcome] += 1
    if outcome == "evaluated" and "score" in candidate.scores:
        session.dev_scores.append(float(candidate.scores["score"]))
    if outcome in ("rejected", "discarded", "admitted"):
        proposal = candidate.proposal
        session.lines.append(f"- **{candidate.id}** ({proposal.proposer} {proposal.operator}) {outcome}: "
                             f"{candidate.reason or '-'}")


@hookimpl
def on_iteration_end(run, iteration, summary):
    session = _sessions.get(run.id)
    if session is None:
        return
    values = {"iteration/train_score": summary.get("train_score", 0.0),
              "iteration/failures": summary.get("failures", 0),
              "iteration/candidates": len(summary.get("candidates", [])),
              "iteration/admitted": len(summary.get("admitted", [])),
              **{f"candidates/{o}": session.outcomes[o] for o in OUTCOMES},
              "frontier/size": len(run.frontier.members)}
    if session.dev_scores:
        values["candidates/best_dev_score"] = max(session.dev_scores)
    if run.frontier.members:
        values |= {f"frontier/best_{k}": v for k, v in numbers(run.frontier.best().metrics).items()}
    session.each("metrics", numbers(values), iteration, "iteration")
    if session.lines:
        session.each("text", "candidates", "\n".join(session.lines), iteration)
    session.new_iteration()


def _session_of_training(run) -> tuple[Session | None, str]:
    """The session a training run reports into, and its metrics' prefix: a loop run's own training runs
    (``RUN-grpo-it3``) go to the loop run's session; ``evolver train`` opens one of its own."""
    if run.id in _sessions:
        return _sessions[run.id], "train"
    for owner, session in _sessions.items():
        if run.id.startswith(owner + "-"):
            return session, f"train/{run.id[len(owner) + 1:]}"
    return _open(run), "train"


@hookimpl
def on_train_step(run, step, metrics):
    session, prefix = _session_of_training(run)
    if session is not None:
        session.each("metrics", {f"{prefix}/{k}": v for k, v in numbers(metrics).items()}, step, f"{prefix}/step")


@hookimpl
def on_run_end(run, summary):
    session = _sessions.pop(run.id, None)
    if session is None:
        return
    tests = dict(summary.get("test") or {})
    if summary.get("best") in tests:
        tests["best"] = tests[summary["best"]]
    if (summary.get("best_of_n") or {}).get("test"):
        tests["best-of-n"] = summary["best_of_n"]["test"]
    session.each("metrics", numbers({"test": tests}), int(summary.get("iterations", 0)), "iteration")
    if summary.get("report"):
        md = Path(summary["report"])
        session.each("artifacts", sorted(md.parent.glob(f"{run.id}.*")), "report")
    session.close()


@atexit.register
def _close_all() -> None:
    """Sessions no ``on_run_end`` closes (``evolver train``, a run that failed) are flushed at exit."""
    while _sessions:
        _sessions.popitem()[1].close()
