"""The Pareto frontier of programs, and how a parent is picked from it.

A member is a program with a vector of objective values (from its dev evaluation) and, for the
metrics a paired test compares (``score``, ``success``), its per-task dev values (``per_task``:
``{metric: {task_id: [episode values]}}``).

Comparing a candidate with a member, objective by objective, gives better / worse / tied:
  - on ``score`` and ``success``, with ``gate`` "bootstrap" or "sign": the paired test on their common
    dev tasks (:func:`evolver.gate.compare` at ``level``): better or worse only when the test says so;
  - on every other objective (context tokens, cost), and whenever either side lacks per-task values
    or ``gate`` is "none": the plain values (equal when ``math.isclose``).
A dominates B when A is better on one objective and worse on none. Admission, in order:
  1. a member that dominates the candidate, or ties it on every objective, keeps it out: so a
     candidate statistically tied on score with everything never enters on score noise alone
     (it can still enter by being leaner, which is measured, not sampled);
  2. members the candidate dominates leave ("the members it displaces"), but only where its mean on the
     primary objective is no lower than theirs: a policy that fails sooner is leaner too (fewer steps,
     fewer tokens), so a score tied within noise but lower on the mean enters beside the member, as
     the trade-off it is, and does not replace it;
  3. capacity ``k``: while more than ``k`` would remain, the weakest member (lowest primary objective,
     the first one listed, then the next objectives, then the newest) must be beaten by the candidate
     in the same order of objectives, with the same comparisons: the first objective that is not a
     tie decides; a candidate that does not beat it is rejected and the incumbent keeps its place
     (EvoSkill's rule: beat the weakest member, here by evidence).
With ``gate = "none"`` this is plain Pareto on mean values (an exact tie keeps the incumbent).
With a single objective Pareto keeps only the best program.

Each :class:`Decision` names the member its reason refers to (``versus``: the one that kept the
candidate out, the strongest one it displaced, or else the best member) with the paired score
comparison against it (``paired``), computed (bootstrap) even when the gate is off, for the report.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from evolver.gate import Comparison, compare

DEFAULT_OBJECTIVES = ("score:max", "context_tokens:min", "cost:min")
GATES = ("bootstrap", "sign", "none")
PAIRED_METRICS = ("score", "success")  # per-task values exist for these: a paired test can compare them


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
    per_task: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # metric -> task -> values


@dataclass
class Decision:
    admitted: bool
    evicted: list[str] = field(default_factory=list)
    reason: str = ""  # the rule, then the paired evidence against ``versus``
    rule: str = ""  # the rule alone ("dominated by seed", "displaces seed", ...)
    versus: str = ""  # the member the reason refers to
    paired: Comparison | None = None  # the candidate's score against ``versus``, per task


def dominates(a: dict, b: dict, objectives: list[Objective]) -> bool:
    """a dominates b on plain values: no worse on every objective and strictly better on at least one."""
    strictly = False
    for o in objectives:
        if o.better(b[o.metric], a[o.metric]):
            return False
        if o.better(a[o.metric], b[o.metric]):
            strictly = True
    return strictly


@dataclass
class Frontier:
    """The run's non-dominated programs (``members``, at most ``capacity``) under ``objectives``; ``consider``
    decides an admission by the rules above, ``best()`` is the member first on the primary objective."""

    objectives: list[Objective]
    capacity: int = 3
    members: list[Member] = field(default_factory=list)
    _counter: int = 0
    gate: str = "bootstrap"  # "bootstrap" | "sign" | "none"
    level: float = 0.95

    def __post_init__(self) -> None:
        if self.gate not in GATES:
            raise ValueError(f"frontier gate {self.gate!r}: expected one of {', '.join(GATES)}")

    @classmethod
    def from_config(cls, objectives: list[str] | tuple[str, ...] = DEFAULT_OBJECTIVES, capacity: int = 3,
                    gate: str = "bootstrap", level: float = 0.95):
        return cls([Objective.parse(o) for o in objectives], capacity, gate=gate, level=level)

    def ids(self) -> list[str]:
        return [m.program_id for m in self.members]

    def get(self, program_id: str) -> Member | None:
        return next((m for m in self.members if m.program_id == program_id), None)

    def _rank_key(self, m: Member) -> tuple:
        # Larger is better on every position; the last entry keeps incumbents ahead of newcomers.
        return tuple(o.key(m.metrics[o.metric]) for o in self.objectives) + (-m.order,)

    def best(self) -> Member:
        return max(self.members, key=self._rank_key)

    def paired(self, a: Member, b: Member, metric: str = "score", method: str | None = None) -> Comparison | None:
        """A's per-task ``metric`` against B's (the gate's test; bootstrap when the gate is off)."""
        va, vb = a.per_task.get(metric), b.per_task.get(metric)
        if not va or not vb:
            return None
        return compare(va, vb, method or (self.gate if self.gate != "none" else "bootstrap"), self.level)

    def _verdicts(self, cand: Member, m: Member) -> list[int]:
        """Per objective: +1 the candidate is better than ``m``, -1 worse, 0 tied (see the module doc)."""
        out = []
        for o in self.objectives:
            c = self.paired(cand, m, o.metric) if self.gate != "none" and o.metric in PAIRED_METRICS else None
            if c is not None:
                sign = {"better": 1, "worse": -1, "tied": 0}[c.verdict]
                out.append(sign if o.goal == "max" else -sign)
            else:
                a, b = cand.metrics[o.metric], m.metrics[o.metric]
                out.append(0 if math.isclose(a, b) else 1 if o.better(a, b) else -1)
        return out

    def consider(self, program_id: str, metrics: dict[str, float], iteration: int = 0,
                 per_task: dict[str, dict[str, list[float]]] | None = None) -> Decision:
        """Offer a candidate; returns whether it entered, whom it evicted, and why (module doc).
        ``per_task`` holds its dev values per task (``{metric: {task_id: [values]}}``) for the gate."""
        missing = [o.metric for o in self.objectives if o.metric not in metrics]
        if missing:
            raise ValueError(f"candidate {program_id} lacks objective values {missing}")
        new = Member(program_id, dict(metrics), iteration, self._counter + 1, dict(per_task or {}))
        verdicts = {m.program_id: self._verdicts(new, m) for m in self.members}

        def decided(admitted: bool, rule: str, versus: Member | None, evicted=()) -> Decision:
            paired = self.paired(new, versus) if versus else None
            return Decision(admitted, [m.program_id for m in evicted], rule + self._why(paired, versus), rule,
                            versus.program_id if versus else "", paired)

        for m in self.members:
            v = verdicts[m.program_id]
            if min(v) < 0 and max(v) <= 0:
                return decided(False, f"dominated by {m.program_id}", m)
            if not any(v):
                return decided(False, f"ties {m.program_id}", m)
        primary = self.objectives[0]

        def no_lower(m: Member) -> bool:
            a, b = new.metrics[primary.metric], m.metrics[primary.metric]
            return math.isclose(a, b) or primary.better(a, b)
        # min >= 0 and, as no tie got here, > 0 somewhere
        dominated = [m for m in self.members if min(verdicts[m.program_id]) >= 0 and no_lower(m)]
        kept = [m for m in self.members if m not in dominated]
        over_capacity = []
        while len(kept) + 1 > self.capacity:
            weakest = min(kept, key=self._rank_key)
            first = next((s for s in verdicts[weakest.program_id] if s), 0)
            if first <= 0:
                return decided(False, f"non-dominated, but not better than the weakest member {weakest.program_id} "
                               f"at capacity {self.capacity}", weakest)
            kept.remove(weakest)
            over_capacity.append(weakest)
        gone = dominated + over_capacity
        versus = max(gone, key=self._rank_key) if gone else (self.best() if self.members else None)
        self._counter += 1
        self.members = kept + [new]
        return decided(True, f"displaces {', '.join(m.program_id for m in gone)}" if gone else "non-dominated",
                       versus, gone)

    def _why(self, c: Comparison | None, m: Member | None) -> str:
        if c is None or m is None:
            return ""
        test = f"{c.method} {c.level:.0%}" if self.gate != "none" else "bootstrap, gate off"
        return f" (score {c.verdict}: paired {c} vs {m.program_id}, {test})"

    def to_dict(self) -> dict:
        return {"objectives": [f"{o.metric}:{o.goal}" for o in self.objectives], "capacity": self.capacity,
                "counter": self._counter, "gate": self.gate, "level": self.level,
                "members": [{"program_id": m.program_id, "metrics": m.metrics, "admitted_at": m.admitted_at,
                             "order": m.order, "per_task": m.per_task} for m in self.members]}

    @classmethod
    def from_dict(cls, data: dict) -> "Frontier":
        f = cls.from_config(data["objectives"], data["capacity"], data.get("gate", "bootstrap"), data.get("level", 0.95))
        f._counter = data.get("counter", 0)
        f.members = [Member(**m) for m in data["members"]]
        return f


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
