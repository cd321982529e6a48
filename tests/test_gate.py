"""Paired statistics for admission (evolver/gate.py) on hand-made vectors and simulated dev splits."""
import math

import numpy as np
import pytest

from evolver.gate import _t_quantile, compare, expanded_level, interim_level, paired_bootstrap, sign_test, task_means


def tasks(values):
    return {f"t{i:02d}": v for i, v in enumerate(values)}


def test_bootstrap_interval_contains_the_true_difference_and_widens_with_the_level():
    rng = np.random.default_rng(3)
    b = rng.uniform(0, 0.6, 30)
    a = b + 0.2 + rng.normal(0, 0.1, 30)
    diff, low, high = paired_bootstrap(a, b)
    assert diff == pytest.approx(float(np.mean(a - b))) and low < 0.2 < high
    assert paired_bootstrap(a, b) == (diff, low, high)  # seeded: the same data decides the same way
    _, low80, high80 = paired_bootstrap(a, b, level=0.80)
    _, low99, high99 = paired_bootstrap(a, b, level=0.99)
    assert low99 < low < low80 < diff < high80 < high < high99


def test_the_t_quantile_matches_the_printed_tables_and_widens_small_splits():
    """Student's t at 95% and 99% two-sided (any printed table), and the expanded level it gives."""
    for nu, level, table in ((1, 0.95, 12.706), (2, 0.95, 4.303), (10, 0.99, 3.169), (11, 0.95, 2.201),
                             (23, 0.95, 2.069), (120, 0.95, 1.980), (1000, 0.99, 2.581), (10**6, 0.95, 1.960)):
        assert _t_quantile(level, nu) == pytest.approx(table, abs=1e-3)
    assert expanded_level(0.95, 24) == pytest.approx(0.9654, abs=1e-4)
    assert expanded_level(0.95, 12) > expanded_level(0.95, 24) > expanded_level(0.95, 1000) > 0.95
    assert expanded_level(0.95, 1) == 0.95
    low_24 = paired_bootstrap(np.full(24, 0.1) + np.linspace(-0.3, 0.3, 24), np.zeros(24))[1]
    d = np.full(2, 0.1) + np.array([-0.3, 0.3])  # 2 tasks: the ends are the extreme resample means
    assert paired_bootstrap(d, np.zeros(2))[1:] == pytest.approx((-0.2, 0.4)) and low_24 > -0.2


def test_no_gain_is_admitted_near_the_nominal_rate():
    """On 24 tasks at 95% (nominal 2.5%) the expanded interval admits a candidate no better than the
    member 3.6% of the time in these 1,000 splits; the plain percentile interval admitted 4.3%."""
    rng = np.random.default_rng(3)
    null = [np.clip(rng.normal(0, 0.3, 24), -1, 1) for _ in range(1000)]
    admitted = sum(paired_bootstrap(d, np.zeros(24), 0.95, 2000, r)[1] > 0 for r, d in enumerate(null))
    assert admitted / len(null) <= 0.04


def test_several_episodes_per_task_are_averaged_per_task_first():
    a = [[1, 0, 1], [0, 0, 0], [1, 1, 1], [0.5, 0.5, 0.5]]
    b = [0.0, 0.0, 1.0, 0.0]
    assert list(task_means(a)) == pytest.approx([2 / 3, 0, 1, 0.5])
    assert paired_bootstrap(a, b) == paired_bootstrap(task_means(a), b)  # resampling tasks, not episodes
    c = compare(tasks(a), tasks([[v] for v in b]))
    assert c.n == 4 and c.episodes == 2.0 and c.diff == pytest.approx((2 / 3 + 0.5) / 4)


def test_sign_test_is_exact_and_drops_ties():
    s = sign_test([1.0] * 9 + [0.5] * 3, [0.0] * 9 + [0.5] * 3)  # 9 wins, 3 ties
    assert (s.wins, s.losses, s.ties) == (9, 0, 3) and s.p_value == pytest.approx(2 / 2 ** 9)
    s = sign_test([1.0] * 9 + [0.0] * 3, [0.0] * 9 + [1.0] * 3)  # 9 wins, 3 losses
    assert s.p_value == pytest.approx(2 * (1 + 12 + 66 + 220) / 4096)
    assert sign_test([0.3] * 5, [0.3] * 5).p_value == 1.0  # all ties: nothing to test
    # 5 wins out of 5 cannot reach 95% two-sided (p = 1/16): the interval keeps 0
    s = sign_test([1.0] * 5, [0.0] * 5)
    assert s.p_value == pytest.approx(1 / 16) and s.low <= 0 < s.high


def test_the_sign_interval_excludes_zero_exactly_when_the_test_rejects():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        d = np.round(rng.normal(rng.uniform(-0.5, 0.5), 0.5, n), 1)  # rounding makes ties
        s = sign_test(d, np.zeros(n))
        rejects = s.p_value <= 0.05 + 1e-12
        assert (s.low > 0 or s.high < 0) == rejects
        if rejects:
            assert (s.low > 0) == (s.wins > s.losses)


@pytest.mark.parametrize("method", ["bootstrap", "sign"])
def test_compare_verdicts(method):
    base = [0.0, 0.5, 0.0, 0.25] * 3
    one = [b + (0.5 if i == 0 else 0.0) for i, b in enumerate(base)]  # better on 1 task of 12
    most = [b + (0.5 if i < 9 else 0.0) for i, b in enumerate(base)]  # better on 9 of 12
    assert compare(tasks(one), tasks(base), method).verdict == "tied"
    c = compare(tasks(most), tasks(base), method)
    assert c.verdict == "better" and c.low > 0 and c.method == method and c.n == 12
    assert compare(tasks(base), tasks(most), method).verdict == "worse"
    assert (c.p_value is None) == (method == "bootstrap")
    assert str(c).startswith(f"+{0.375:.3f} [") and str(c).endswith("] on 12 tasks")


def test_compare_pairs_only_common_tasks_and_rejects_unknown_methods():
    a = {"x": 1.0, "y": 1.0, "z": 0.0}
    b = {"y": 0.0, "z": 0.0, "w": 1.0}
    assert compare(a, b).n == 2 and compare(a, b).diff == pytest.approx(0.5)
    assert compare({"x": 1.0}, {"y": 1.0}) is None
    with pytest.raises(ValueError, match="bootstrap, sign"):
        compare(a, b, "t-test")


def simulated_pass_rate(effect: float, spread: float, n_tasks: int = 24, runs: int = 200) -> float:
    """How often a candidate passes the 95% bootstrap gate against a member on ``n_tasks`` dev tasks,
    when its true per-task gain is ``effect`` and the per-task differences spread with sd ``spread``
    (scores in 0..1, so differences are clipped to [-1, 1])."""
    rng = np.random.default_rng(7)
    passed = 0
    for r in range(runs):
        d = np.clip(rng.normal(effect, spread, n_tasks), -1, 1)
        passed += compare(tasks(d), tasks(np.zeros(n_tasks)), resamples=2000, seed=r).verdict == "better"
    return passed / runs


def test_power_at_the_default_dev_size():
    """The default dev split (4 tasks x 6 twx-easy categories = 24) is large enough for a real +0.2
    gain with a per-task spread of 0.3 to pass at 95% most of the time, while a candidate no better
    than the member rarely passes (near the nominal 2.5%: this 200-split simulation admits 1.5%)."""
    assert simulated_pass_rate(0.2, 0.3) >= 0.8
    assert simulated_pass_rate(0.0, 0.3) <= 0.06
    assert math.isclose(simulated_pass_rate(0.2, 0.3, n_tasks=24), simulated_pass_rate(0.2, 0.3))  # seeded


def test_the_interim_level_spends_little_of_the_error_early():
    assert math.isclose(interim_level(0.95, 1.0), 0.95)
    assert math.isclose(interim_level(0.95, 0.5), 0.99443, abs_tol=1e-4)  # O'Brien-Fleming halfway
    assert interim_level(0.95, 0.25) > interim_level(0.95, 0.5) > interim_level(0.90, 0.5)
    with pytest.raises(ValueError, match="share of the tasks"):
        interim_level(0.95, 0.0)


def two_look_pass_rate(effect: float, spread: float = 0.3, n_tasks: int = 24,
                       runs: int = 400) -> tuple[float, float, float]:
    """(admitted by the whole split's 95% test alone, admitted at either look, admitted at the halfway
    look) when a candidate is admitted early if its first half passes at the interim level."""
    rng = np.random.default_rng(11)
    alone = either = early = 0
    half = n_tasks // 2
    for r in range(runs):
        d = np.clip(rng.normal(effect, spread, n_tasks), -1, 1)
        first = compare(tasks(d[:half]), tasks(np.zeros(half)), level=interim_level(0.95, 0.5), resamples=2000, seed=r)
        whole = compare(tasks(d), tasks(np.zeros(n_tasks)), resamples=2000, seed=r)
        alone += whole.verdict == "better"
        early += first.verdict == "better"
        either += first.verdict == "better" or whole.verdict == "better"
    return alone / runs, either / runs, early / runs


def test_an_early_look_keeps_false_admissions_near_the_gate_alone_and_stops_large_gains():
    """A candidate no better than the member passes the two looks about as rarely as the 95% gate alone
    (in these 400 splits 5% at either look, the early one 0.75% against its nominal 0.28%), while a large
    gain (+0.5) is already admitted at the halfway look."""
    alone, either, early = two_look_pass_rate(0.0)
    assert either <= alone + 0.015 and early <= 0.012
    _, big_either, big_early = two_look_pass_rate(0.5)
    assert big_early >= 0.95 and big_either == 1.0
