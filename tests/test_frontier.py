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


def per_task(scores):
    """Per-task dev values as the loop records them: one episode per task."""
    return {"score": {f"t{i}": [v] for i, v in enumerate(scores)},
            "success": {f"t{i}": [float(v >= 1.0)] for i, v in enumerate(scores)}}


SEED12 = [0.0, 0.5, 0.0, 0.25, 0.0, 0.5, 0.0, 0.25, 0.0, 0.5, 0.0, 0.25]


def with_gains(base, gains):
    return [min(1.0, b + g) for b, g in zip(base, gains)]


def consider(f, pid, scores, tokens):
    return f.consider(pid, m(sum(scores) / len(scores), tokens), per_task=per_task(scores))


@pytest.mark.parametrize("gate", ["bootstrap", "sign"])
def test_the_gate_rejects_a_one_task_gain_and_admits_a_gain_on_most_tasks(gate):
    f = Frontier(OBJ, capacity=5, gate=gate)
    consider(f, "seed", SEED12, 100)
    lucky = with_gains(SEED12, [0.5] + [0.0] * 11)  # better on 1 task of 12
    d = consider(f, "lucky", lucky, 150)  # a trade-off on mean values, but the score gain is noise
    assert not d.admitted and d.reason.startswith("dominated by seed") and d.versus == "seed"
    assert d.paired.verdict == "tied" and d.paired.n == 12 and d.paired.diff == pytest.approx(0.5 / 12)
    d = consider(f, "lucky-same-size", lucky, 100)
    assert not d.admitted and d.reason.startswith("ties seed")
    better = with_gains(SEED12, [0.5] * 9 + [0.0] * 3)  # better on 9 of 12
    d = consider(f, "better", better, 150)
    assert d.admitted and d.evicted == [] and d.paired.verdict == "better" and d.paired.low > 0
    assert f"score better: paired {d.paired} vs seed" in d.reason
    assert f.ids() == ["seed", "better"]


def test_a_tied_score_with_fewer_tokens_enters_on_the_tokens():
    f = Frontier(OBJ, capacity=5)
    consider(f, "seed", SEED12, 100)
    d = consider(f, "leaner", SEED12[::-1], 90)  # the same mean score, tasks shuffled; tokens down
    assert d.admitted and d.evicted == ["seed"] and d.reason.startswith("displaces seed")


def test_a_lower_score_within_noise_does_not_displace_for_being_leaner():
    # A policy that fails sooner plays fewer steps: leaner on tokens, while its lower score is within noise.
    f = Frontier(OBJ, capacity=5)
    consider(f, "seed", SEED12, 100)
    d = consider(f, "fails-sooner", with_gains(SEED12, [-0.25] + [0.0] * 11), 90)
    assert d.paired.verdict == "tied" and d.paired.diff < 0
    assert d.admitted and d.evicted == [] and d.reason.startswith("non-dominated")  # a trade-off, beside it
    assert f.best().program_id == "seed" and f.ids() == ["seed", "fails-sooner"]


def test_without_the_gate_it_is_plain_pareto():
    f = Frontier(OBJ, capacity=5, gate="none")
    consider(f, "seed", SEED12, 100)
    d = consider(f, "lucky", with_gains(SEED12, [0.5] + [0.0] * 11), 150)
    assert d.admitted and d.paired.verdict == "tied" and "gate off" in d.reason  # reported, not used


def test_at_capacity_the_weakest_member_must_be_beaten_by_evidence():
    objectives = OBJ + [Objective("cost", "min")]

    def offer(f, pid, scores, tokens, cost):
        metrics = {"score": sum(scores) / len(scores), "context_tokens": tokens, "cost": cost}
        return f.consider(pid, metrics, per_task=per_task(scores))
    for gate in ("bootstrap", "none"):
        f = Frontier(objectives, capacity=2, gate=gate)
        offer(f, "strong", with_gains(SEED12, [0.5] * 12), 300, 300)
        offer(f, "weak", SEED12, 100, 100)
        # a trade-off with both members; against weak (the weakest): score better on 1 task of 12 only,
        # so the next objective decides, and it has more context tokens
        d = offer(f, "noisy", with_gains(SEED12, [0.5] + [0.0] * 11), 150, 50)
        if gate == "none":  # plain Pareto: a higher mean score beats the weakest
            assert d.admitted and d.evicted == ["weak"]
            continue
        assert not d.admitted and d.reason.startswith("non-dominated, but not better than the weakest member weak")
        d = offer(f, "real", with_gains(SEED12, [0.25] * 12), 150, 50)
        assert d.admitted and d.evicted == ["weak"] and sorted(f.ids()) == ["real", "strong"]


def test_the_gate_and_per_task_values_survive_a_round_trip():
    f = Frontier(OBJ, capacity=3, gate="sign", level=0.9)
    consider(f, "seed", SEED12, 100)
    consider(f, "a", with_gains(SEED12, [0.5] * 12), 120)
    g = Frontier.from_dict(f.to_dict())
    assert (g.gate, g.level) == ("sign", 0.9) and g.get("a").per_task == f.get("a").per_task
    cand = with_gains(SEED12, [0.5] * 10 + [0.0] * 2)
    assert consider(f, "c", cand, 110).reason == consider(g, "c", cand, 110).reason
    with pytest.raises(ValueError, match="gate"):
        Frontier(OBJ, gate="t-test")
