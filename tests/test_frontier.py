import pytest

from evolver.frontier import Frontier, Objective, best, dominates, make_random, make_ucb, round_robin

OBJ = [Objective("score", "max"), Objective("context_tokens", "min")]


def m(score, tokens):
    return {"score": score, "context_tokens": tokens, "cost": tokens}


def test_dominance_needs_one_strict_improvement():
    assert dominates(m(0.5, 100), m(0.4, 100), OBJ)
    assert dominates(m(0.5, 90), m(0.5, 100), OBJ)
    assert not dominates(m(0.5, 100), m(0.5, 100), OBJ)
    assert not dominates(m(0.6, 200), m(0.5, 100), OBJ)  # a trade-off: neither dominates


def test_admission_and_eviction_by_dominance():
    f = Frontier(OBJ, capacity=5)
    assert f.consider("seed", m(0.2, 100)).admitted
    d = f.consider("a", m(0.3, 150))  # better score, more tokens: both stay
    assert d.admitted and d.evicted == []
    d = f.consider("b", m(0.35, 90))  # dominates both
    assert d.admitted and sorted(d.evicted) == ["a", "seed"]
    assert f.ids() == ["b"]
    d = f.consider("c", m(0.3, 95))
    assert not d.admitted and "dominated by b" in d.reason
    assert not f.consider("b2", m(0.35, 90)).admitted  # an exact tie does not displace the incumbent


def test_capacity_tie_break_evicts_lowest_primary_objective():
    f = Frontier(OBJ, capacity=2)
    f.consider("x", m(0.5, 300))
    f.consider("y", m(0.3, 100))
    d = f.consider("z", m(0.4, 200))  # non-dominated; capacity 2 -> y (lowest score) goes
    assert d.admitted and d.evicted == ["y"]
    d = f.consider("w", m(0.2, 50))  # non-dominated but the weakest by score: rejected
    assert not d.admitted and "weakest" in d.reason
    assert sorted(f.ids()) == ["x", "z"]


def test_single_objective_keeps_only_the_best():
    f = Frontier([Objective("score", "max")], capacity=3)
    f.consider("a", {"score": 0.1})
    assert f.consider("b", {"score": 0.2}).evicted == ["a"]  # one objective: b dominates a
    assert not f.consider("c", {"score": 0.15}).admitted
    assert f.ids() == ["b"]


def test_round_trip_and_selectors():
    f = Frontier(OBJ, capacity=3)
    f.consider("a", m(0.5, 300))
    f.consider("b", m(0.3, 100))
    g = Frontier.from_dict(f.to_dict())
    assert g.ids() == f.ids() and g.best().program_id == "a"
    assert [round_robin(g, i, []).program_id for i in range(3)] == ["a", "b", "a"]
    assert best(g, 0, []).program_id == "a"
    rnd = make_random(seed=1)
    assert rnd(g, 4, []).program_id == rnd(g, 4, []).program_id  # deterministic per iteration
    ucb = make_ucb(c=1.0)
    assert ucb(g, 0, ["a"]).program_id == "b"  # unvisited first


def test_objective_parse_errors():
    with pytest.raises(ValueError, match="max' or 'min"):
        Objective.parse("score:up")
    with pytest.raises(ValueError, match="lacks objective"):
        Frontier(OBJ).consider("x", {"score": 1.0})


def test_noise_margin_keeps_out_a_one_task_gain_but_not_a_real_one():
    f = Frontier(OBJ, capacity=5)
    f.consider("seed", m(0.0, 100))
    d = f.consider("lucky", m(0.083, 150), margins={"score": 1 / 12})
    assert not d.admitted and "within the noise margin of seed (score +0.083" in d.reason
    assert f.consider("better", m(0.25, 150), margins={"score": 1 / 12}).admitted
    # fewer tokens is a gain the score margin does not cover
    assert f.consider("leaner", m(0.0, 90), margins={"score": 1 / 12}).admitted
