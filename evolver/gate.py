"""Paired statistics: is program A better than program B on the same tasks, or is it noise?

A dev split of a few dozen tasks is small: one lucky task moves a mean score by 1/n. Comparing two
programs task by task (a *paired* comparison) removes the tasks' own difficulty from the noise, and
a test at a stated level says whether the difference is larger than what chance makes of it.

- :func:`paired_bootstrap`: resample *tasks* with replacement, take the mean per-task difference of
  each resample; the percentile interval is the uncertainty of the mean difference. A plain
  percentile interval is too narrow on a few dozen tasks (it ignores that the spread itself is
  estimated), so it is read at Hesterberg's *expanded* level (:func:`expanded_level`): the level
  whose normal quantile equals the Student-t one at n - 1 degrees of freedom, times sqrt(n / (n - 1)).
  With several episodes per task (sampled play) each task's episodes are averaged first, so the
  interval counts tasks, not episodes: episodes of one task are not independent evidence.
- :func:`sign_test`: the exact binomial test on wins and losses (ties dropped); it assumes nothing
  about the size of the differences, so it is the more conservative of the two.
- :func:`compare`: either test on two programs' per-task values (``{task_id: [values]}``), over their
  common tasks, as a :class:`Comparison` with a verdict better / worse / tied.

Everything is deterministic (a fixed seed for the resampling), so a resumed run decides as an
uninterrupted one did. Power at the default sizes (24 dev tasks, 95%): a real gain of +0.2 with a
per-task spread of 0.3 passes the bootstrap ~90% of the time, while a candidate no better than the
member passes ~3% of the time against the nominal 2.5% (the plain percentile interval: ~4%; at the
early look's 99.44% on 12 tasks, ~0.9% against its nominal 0.28%, the plain one ~1.5%;
``tests/test_gate.py`` simulates these).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Sequence

import numpy as np

METHODS = ("bootstrap", "sign")
RESAMPLES = 10_000  # the interval's ends move by < 0.005 between seeds at 24 tasks
_EPS = 1e-12


@dataclass(frozen=True)
class Comparison:
    """A paired comparison of A against B: ``diff`` is mean(A - B) over ``n`` common tasks, with
    ``episodes`` episodes per task (the mean when it varies); ``[low, high]`` the interval at ``level``
    (bootstrap: of the mean difference; sign test: of the median untied difference)."""

    method: str
    n: int
    episodes: float
    diff: float
    low: float
    high: float
    level: float
    verdict: str  # "better" | "worse" | "tied"
    p_value: float | None = None  # sign test only

    def __str__(self) -> str:
        per = f" x {self.episodes:g} episodes" if self.episodes != 1 else ""
        return f"{self.diff:+.3f} [{self.low:.3f}, {self.high:.3f}] on {self.n} tasks{per}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SignTest:
    wins: int
    losses: int
    ties: int
    p_value: float  # two-sided, exact
    low: float  # interval of the median untied difference
    high: float


def task_means(values: Sequence) -> np.ndarray:
    """One number per task: a float stays, a sequence of episode values becomes its mean."""
    return np.array([float(np.mean(v)) if isinstance(v, (list, tuple, np.ndarray)) else float(v)
                     for v in values], dtype=float)


def paired_bootstrap(a: Sequence, b: Sequence, level: float = 0.95, resamples: int = RESAMPLES,
                     seed: int = 0, expand: bool = True) -> tuple[float, float, float]:
    """``(mean difference, low, high)`` of A - B over paired tasks, by the expanded percentile bootstrap
    over tasks (module doc; ``expand=False``: the plain percentile interval). ``a[i]`` and ``b[i]`` are
    task i's value or its episodes' values."""
    d = _differences(a, b)
    if d.size == 0:
        return 0.0, 0.0, 0.0
    level = expanded_level(level, d.size) if expand else level
    # a few draws beyond each end even far out (at 2 or 3 tasks the level rounds to 1: the ends are the
    # extreme resample means)
    resamples = max(resamples, min(200_000, math.ceil(20 / max(1e-12, 1 - level))))
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // d.size)  # bounded memory whatever the number of tasks
    for start in range(0, resamples, chunk):
        rows = min(chunk, resamples - start)
        means[start:start + rows] = d[rng.integers(0, d.size, size=(rows, d.size))].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(d.mean()), float(low), float(high)


def sign_test(a: Sequence, b: Sequence, level: float = 0.95) -> SignTest:
    """Exact two-sided sign test on the per-task differences, ties dropped, with the matching
    distribution-free interval for the median untied difference: the order statistics
    ``d_(k), d_(m+1-k)`` where ``k`` is the largest with ``2 P(Bin(m, 1/2) <= k-1) <= 1 - level``.
    It excludes 0 exactly when ``p <= 1 - level``. With too few untied tasks for the level (m < 6 at
    95%) no such k exists; the interval is then the observed range widened to include 0."""
    d = _differences(a, b)
    untied = np.sort(d[np.abs(d) > _EPS])
    wins, losses, m = int((untied > 0).sum()), int((untied < 0).sum()), untied.size
    p = min(1.0, 2 * _binom_cdf(min(wins, losses), m)) if m else 1.0
    alpha, k = 1 - level, 0
    while k < m and 2 * _binom_cdf(k, m) <= alpha + _EPS:  # k counts the order statistics cut per side
        k += 1
    if k:
        low, high = float(untied[k - 1]), float(untied[m - k])
    else:
        low = min(0.0, float(untied[0])) if m else 0.0
        high = max(0.0, float(untied[-1])) if m else 0.0
    return SignTest(wins, losses, int(d.size - m), p, low, high)


def compare(a: dict, b: dict, method: str = "bootstrap", level: float = 0.95,
            resamples: int = RESAMPLES, seed: int = 0) -> Comparison | None:
    """Compare A with B on their common tasks (``{task_id: value or [episode values]}``); None when
    they share no task. Verdict: better when the interval lies above 0, worse when below, else tied."""
    if method not in METHODS:
        raise ValueError(f"paired test {method!r}: expected one of {', '.join(METHODS)}")
    common = sorted(set(a) & set(b))
    if not common:
        return None
    va, vb = [a[t] for t in common], [b[t] for t in common]
    episodes = float(np.mean([len(v) if isinstance(v, (list, tuple)) else 1 for v in va + vb]))
    if method == "bootstrap":
        diff, low, high = paired_bootstrap(va, vb, level, resamples, seed)
        p = None
    else:
        s = sign_test(va, vb, level)
        diff, low, high, p = float(_differences(va, vb).mean()), s.low, s.high, s.p_value
    verdict = "better" if low > _EPS else "worse" if high < -_EPS else "tied"
    return Comparison(method, len(common), round(episodes, 3), diff, low, high, level, verdict, p)


def interim_level(level: float, fraction: float) -> float:
    """The confidence level of a look at ``fraction`` of the tasks, before the whole split's test at
    ``level``, that keeps the chance of admitting a candidate no better than a member near ``1 - level``
    over both looks: the O'Brien-Fleming-like alpha spending of Lan and DeMets,
    ``alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))``. Halfway at 95% that is ~99.44%: an early look
    spends little of the error, so only a gain far beyond noise stops there."""
    if not 0 < fraction <= 1:
        raise ValueError(f"interim look at fraction {fraction}: expected a share of the tasks in (0, 1]")
    normal = NormalDist()
    z = normal.inv_cdf(1 - (1 - level) / 2)
    return 1 - 2 * (1 - normal.cdf(z / math.sqrt(fraction)))


def expanded_level(level: float, n: int) -> float:
    """The level at which to read a percentile bootstrap of ``n`` tasks so that it is as wide as a
    Student-t interval at ``level`` with the spread's small-sample correction (Hesterberg, "What teachers
    should know about the bootstrap", 2015): ``2 Phi(sqrt(n / (n - 1)) t_{n-1, (1 + level) / 2}) - 1``.
    At 24 tasks 95% becomes ~96.5%; at 12 tasks 99.44% becomes ~99.98%. Fewer than 2 tasks: ``level``."""
    if n < 2:
        return level
    t = _t_quantile(level, n - 1)
    return 2 * NormalDist().cdf(math.sqrt(n / (n - 1)) * t) - 1


@lru_cache(maxsize=256)
def _t_quantile(level: float, nu: int) -> float:
    """The t with P(|T| <= t) = ``level`` for Student's T with ``nu`` degrees of freedom, by bisection on
    the closed form of Abramowitz and Stegun 26.7.3-4 (numpy ships no t distribution; past 400 degrees of
    freedom the Cornish-Fisher expansion's first terms, A&S 26.7.5, are within 1e-4 of it)."""
    if nu > 400:
        z = NormalDist().inv_cdf((1 + level) / 2)
        return z + (z ** 3 + z) / (4 * nu) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * nu ** 2)
    low, high = 0.0, 1e6
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_central(mid, nu) < level else (low, mid)
    return (low + high) / 2


def _t_central(t: float, nu: int) -> float:
    """P(|T| <= t) for Student's T with ``nu`` degrees of freedom."""
    theta = math.atan(t / math.sqrt(nu))
    c2 = math.cos(theta) ** 2
    if nu % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(1, nu // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return math.sin(theta) * total
    if nu == 1:
        return 2 * theta / math.pi
    term, total = 1.0, 1.0
    for k in range(1, (nu - 1) // 2):
        term *= c2 * (2 * k) / (2 * k + 1)
        total += term
    return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)


def _differences(a: Sequence, b: Sequence) -> np.ndarray:
    if len(a) != len(b):
        raise ValueError(f"paired values need one pair per task: {len(a)} vs {len(b)}")
    return task_means(a) - task_means(b)


def _binom_cdf(k: int, n: int) -> float:
    """P(Bin(n, 1/2) <= k), exact."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
