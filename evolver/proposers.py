"""The proposer interface: failures + history in, candidate programs out.

A proposer is registered with ``register_proposers(register)`` as ``factory(run, **options)`` and
returns an object with one method::

    propose(ctx: ProposeContext) -> list[Draft]

For each idea it calls ``ctx.new_draft(operator, hypothesis)``, which creates a git worktree on a new
branch from the parent (``draft.path``); it edits files there (skills/, harness/, prompt.md) and
returns the drafts. The loop then commits each draft, runs the cheap checks, evaluates the
survivors together and lets the frontier decide. A proposer never commits, evaluates or touches the
frontier itself, so every proposer gets the same guarantees (lineage, caching, budgets, logging).

An iteration whose rollouts all passed has no failures to show: the loop then asks only the proposers
whose ``needs_failures`` attribute is False (they learn from the store, their own samples or
demonstrations), and skips the iteration when there are none. Without the attribute a proposer needs
failures.

A proposer that builds fewer drafts a call than its share (one skill mined, one model trained) says so
with a ``drafts`` attribute: the run's estimate (:mod:`evolver.estimate`) counts an iteration's
candidates by it. Without it the estimate counts the share. One that can say before the search what
its candidates will cost an episode against the seed has ``price(seed, pilot) -> float | None`` (the
pilot: the seed's first rollouts, with steps); the estimate prices its candidates by it, else at the
seed's rate. One that builds nothing says why with
``run.log``: the loop keeps the last thing it said in the iteration's summary, and the report shows it.

Error policy: a proposer that raises loses only its own candidates for this iteration (the error is
logged as a rejected proposal); a draft it cannot finish it returns with ``draft.reject(reason)``.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from evolver.types import Episode, Program, Proposal


@dataclass
class Draft:
    """One candidate being built: a worktree on a new branch from the parent (``path``) that the proposer
    edits; the loop commits it. Made by ``ctx.new_draft``, never directly."""

    candidate_id: str
    proposal: Proposal
    path: Path  # the worktree to edit
    #: Strings that must not appear in the candidate's skills or harness (gold answers, task ids
    #: of the tasks it was built from); the loop's leakage audit rejects a candidate that has any.
    forbidden: list[str] = field(default_factory=list)
    #: Gold action sequences of those tasks: three consecutive gold steps in order is a leak.
    forbidden_sequences: list[list[str]] = field(default_factory=list)
    #: Manifest keys for the candidate's commit beyond the loop's own: a trainer's draft sets ``model``
    #: to its checkpoint folder (relative to the workspace), so the candidate plays with those weights.
    manifest: dict = field(default_factory=dict)
    rejected: str = ""

    def reject(self, reason: str) -> "Draft":
        self.rejected = reason
        return self


@dataclass
class ProposeContext:
    """What a proposer gets each iteration: the parent, its failures and contrasting successes (with
    steps), the run's proposal history, the frontier, how many candidates to build (``n``) and
    ``new_draft`` to start each one."""

    run: Any  # evolver.run.Run
    iteration: int
    parent: Program
    failures: list[Episode]  # below the threshold, with full steps
    successes: list[Episode]  # a few contrasting successes, with steps
    history: list[dict]  # every past proposal of this run: operator, hypothesis, status, scores
    frontier: Any  # evolver.frontier.Frontier
    n: int  # how many candidates this proposer should build now
    new_draft: Callable[..., Draft] = None  # new_draft(operator, hypothesis, parent_id=None, detail=None)
    extra: dict = field(default_factory=dict)

    def parent_score(self) -> float | None:
        """The parent's dev score as the frontier holds it; None when it is not a member."""
        member = self.frontier.get(self.parent.id) if self.frontier is not None else None
        return member.metrics.get("score") if member is not None else None


class Proposer(abc.ABC):
    """Base class of proposers (EvoSkill, Meta-Harness, GRPO, ...). Subclassing is optional: the loop only
    calls :meth:`propose` on what the registered ``factory(run, **options)`` returns (the options are the
    config's ``[plugins.NAME]`` table; validate them in the constructor, so a bad one fails at start-up)."""

    #: False: this proposer is asked in an iteration whose rollouts had no failure (``ctx.failures`` empty).
    needs_failures: bool = True
    #: The most drafts one call builds; None: its share of the iteration, ``ctx.n``.
    drafts: int | None = None

    @abc.abstractmethod
    def propose(self, ctx: ProposeContext) -> list[Draft]:
        """Build at most ``ctx.n`` drafts with ``ctx.new_draft(operator, hypothesis)``, edit the files under
        each ``draft.path`` (or ``draft.reject(reason)`` one it cannot finish) and return them. Never commit,
        evaluate or touch the frontier: the loop does (see the module docstring)."""
