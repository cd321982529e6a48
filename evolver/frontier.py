"""The Pareto frontier of programs, and how a parent is picked from it.

A member is a program with a vector of objective values (from its validation evaluation).
Admission: a candidate enters when no member dominates it; members it dominates leave.
Capacity ``k``: when more than ``k`` remain, the tie-break evicts, in order,
  1. the member with the lowest primary objective (the first one listed, by default ``score``),
  2. then the worse value on the next objectives, in order,
  3. then the newest admission (an incumbent keeps its place against an equal newcomer).
A newcomer that is non-dominated but would be the one evicted is rejected: like EvoSkill's rule,
it must beat the weakest member. (With a single objective Pareto keeps only the best program.)
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

DEFAULT_OBJECTIVES = ("score:max", "context_tokens:min", "cost:min")


@dataclass(frozen=True)
class Objective:
    metric: str
    goal: str  # "max" | "min"

    @classmethod
    def parse(cls, text: str) -> "Objective":
        metric, _, goal = text.partition(":")
        goal = goal or "max"
        if goal not in ("max", "min"):
            raise ValueError(f"objective {text!r}: the goal after ':' must be 'max' or 'min'")
        return cls(metric, goal)

    def better(self, a: float, b: float) -> bool:
        return a > b if self.goal == "max" else a < b

    def key(self, value: float) -> float:
        """Sort key where larger is better."""
        return value if self.goal == "max" else -value


@dataclass
class Member:
    program_id: str
    metrics: dict[str, float]
    admitted_at: int = 0  # iteration
    order: int = 0  # admission counter, for the tie-break


@dataclass
class Decision:
    admitted: bool
    evicted: list[str] = field(default_factory=list)
    reason: str = ""


def dominates(a: dict, b: dict, objectives: list[Objective]) -> bool:
    """a dominates b: no worse on every objective and strictly better on at least one."""
    strictly = False
    for o in objectives:
        if o.better(b[o.metric], a[o.metric]):
            return False
        if o.better(a[o.metric], b[o.metric]):
            strictly = True
    return strictly


@dataclass
class Frontier:
    objectives: list[Objective]
    capacity: int = 3
    members: list[Member] = field(default_factory=list)
    _counter: int = 0

    @classmethod
    def from_config(cls, objectives: list[str] | tuple[str, ...] = DEFAULT_OBJECTIVES, capacity: int = 3):
        return cls([Objective.parse(o) for o in objectives], capacity)

    def ids(self) -> list[str]:
        return [m.program_id for m in self.members]

    def get(self, program_id: str) -> Member | None:
        return next((m for m in self.members if m.program_id == program_id), None)

    def _rank_key(self, m: Member) -> tuple:
        # Larger is better on every position; the last entry keeps incumbents ahead of newcomers.
        return tuple(o.key(m.metrics[o.metric]) for o in self.objectives) + (-m.order,)

    def best(self) -> Member:
        return max(self.members, key=self._rank_key)

    def consider(self, program_id: str, metrics: dict[str, float], iteration: int = 0,
                 margins: dict[str, float] | None = None) -> Decision:
        """Offer a candidate; returns whether it entered and whom it evicted (with reasons).

        ``margins`` (per metric) is the noise a candidate must beat: a member that is no worse than
        the candidate by more than the margin on every objective keeps it out ("within the noise
        margin"). Evictions still need strict dominance, so noise never removes a member either.
        """
        missing = [o.metric for o in self.objectives if o.metric not in metrics]
        if missing:
            raise ValueError(f"candidate {program_id} lacks objective values {missing}")
        for m in self.members:
            if dominates(m.metrics, metrics, self.objectives) or _equal(m.metrics, metrics, self.objectives):
                return Decision(False, reason=f"dominated by {m.program_id}"
                                if dominates(m.metrics, metrics, self.objectives) else f"ties {m.program_id}")
        for m in self.members:
            if margins and _within_margin(m.metrics, metrics, self.objectives, margins):
                gains = ", ".join(f"{o.metric} {metrics[o.metric] - m.metrics[o.metric]:+.3f}"
                                  for o in self.objectives if margins.get(o.metric))
                return Decision(False, reason=f"within the noise margin of {m.program_id} ({gains})")
        new = Member(program_id, dict(metrics), iteration, self._counter + 1)
        dominated = [m for m in self.members if dominates(metrics, m.metrics, self.objectives)]
        kept = [m for m in self.members if m not in dominated] + [new]
        over_capacity = []
        while len(kept) > self.capacity:
            weakest = min(kept, key=self._rank_key)
            if weakest is new:
                return Decision(False, reason=f"non-dominated, but the weakest at capacity {self.capacity}")
            kept.remove(weakest)
            over_capacity.append(weakest)
        self._counter += 1
        self.members = kept
        return Decision(True, [m.program_id for m in dominated + over_capacity], reason="non-dominated")

    def to_dict(self) -> dict:
        return {"objectives": [f"{o.metric}:{o.goal}" for o in self.objectives], "capacity": self.capacity,
                "counter": self._counter,
                "members": [{"program_id": m.program_id, "metrics": m.metrics, "admitted_at": m.admitted_at,
                             "order": m.order} for m in self.members]}

    @classmethod
    def from_dict(cls, data: dict) -> "Frontier":
        f = cls.from_config(data["objectives"], data["capacity"])
        f._counter = data.get("counter", 0)
        f.members = [Member(**m) for m in data["members"]]
        return f


def _within_margin(member: dict, cand: dict, objectives: list[Objective], margins: dict) -> bool:
    """The candidate is better than the member by at most the margin on every objective."""
    for o in objectives:
        gain = cand[o.metric] - member[o.metric] if o.goal == "max" else member[o.metric] - cand[o.metric]
        if gain > margins.get(o.metric, 0.0) + 1e-12:
            return False
    return True


def _equal(a: dict, b: dict, objectives: list[Objective]) -> bool:
    return all(math.isclose(a[o.metric], b[o.metric]) for o in objectives)


# ---- parent selection ---------------------------------------------------------------------------
# A selector is ``select(frontier, iteration, history) -> Member`` where history is the list of
# parent ids chosen so far in this run. Selectors keep no hidden state, so a resumed run picks the
# same parents it would have picked.

def round_robin(frontier: Frontier, iteration: int, history: list[str]) -> Member:
    members = sorted(frontier.members, key=lambda m: m.order)
    return members[iteration % len(members)]


def best(frontier: Frontier, iteration: int, history: list[str]) -> Member:
    return frontier.best()


def make_random(seed: int = 0):
    def random_parent(frontier: Frontier, iteration: int, history: list[str]) -> Member:
        members = sorted(frontier.members, key=lambda m: m.order)
        return random.Random(seed * 100_003 + iteration).choice(members)
    return random_parent


def make_ucb(c: float = 0.5, metric: str = "score"):
    """UCB1 over members: value + c * sqrt(ln N / n), unvisited members first."""
    def ucb(frontier: Frontier, iteration: int, history: list[str]) -> Member:
        total = max(1, len(history))

        def value(m: Member) -> float:
            n = history.count(m.program_id)
            if n == 0:
                return math.inf
            return m.metrics.get(metric, 0.0) + c * math.sqrt(math.log(total + 1) / n)
        return max(sorted(frontier.members, key=lambda m: m.order), key=value)
    return ucb


SELECTORS = {"round-robin": lambda **_: round_robin, "best": lambda **_: best,
             "random": make_random, "ucb": make_ucb}
