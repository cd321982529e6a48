"""The run's expected spend, said before its search (evolver/estimate.py), and what it spent beside it."""
from pathlib import Path

from evolver.config import LoopConfig, sized
from evolver.estimate import Rate, estimate, estimate_line, forecast, forecast_line
from evolver.types import Task


def splits(train=12, dev=24, test=36, categories=6):
    def tasks(split, n):
        return [Task(id=f"b/{split}/{i}", benchmark="b", split=split, category=f"c{i % categories}", prompt="p")
                for i in range(n)]
    return {"train": tasks("train", train), "dev": tasks("dev", dev), "test": tasks("test", test)}


RATE = Rate(tokens=1000.0, calls=10.0, seconds=10.0, n=6)


def loop(**kw) -> LoopConfig:
    """The loop's config as a run on a benchmark of 6 categories has it (1 / 4 / 6 tasks a category)."""
    return sized(LoopConfig(**kw), 6)


def test_the_seeds_episodes_and_the_search_are_priced_at_the_pilots_rate():
    cfg = loop(iterations=3, candidates_per_iteration=1, max_wall_s=10_000)
    est = estimate(cfg, splits(), 1, RATE, cached=0, elapsed=60, ratio=None, smoke_steps=5, max_steps=50)
    # seed: 24 dev + 36 test + 6 rollouts; search: 3 x (0.1 smoke + 24 dev) + 2 later batches of 6 + 36 test
    assert est["episodes"] == {"seed": 66, "search": round(3 * 24.1 + 12 + 36, 1)}
    assert est["iterations"] == 3 and est["tokens"] == round((66 + 120.3) * 1000) and est["calls"] == round(1863)
    assert "no earlier run here" in estimate_line(est) and "in 3 iterations" in estimate_line(est)


def test_the_wall_budget_the_cache_and_cheaper_candidates_lower_it():
    cfg = loop(iterations=3, candidates_per_iteration=1, max_wall_s=540)
    # the seed's dev takes 240 s and an iteration (6 rollouts + 24.1 candidate episodes) ~300 s: one fits
    short = estimate(cfg, splits(), 1, RATE, cached=0, elapsed=60, ratio=None, smoke_steps=5, max_steps=50)
    assert short["iterations"] == 1
    cheap = estimate(cfg, splits(), 1, RATE, cached=0, elapsed=60, ratio=0.1, smoke_steps=5, max_steps=50)
    # 300 s before the search, ~84 s an iteration: a third would end past 540 s, as the loop judges it
    assert cheap["iterations"] == 2 and cheap["tokens"] < short["tokens"]
    assert "0.10x the seed's rate" in estimate_line(cheap)
    repeat = estimate(cfg, splits(), 1, RATE, cached=60, elapsed=1, ratio=0.1, smoke_steps=5, max_steps=50,
                      pilot_played=0)
    assert repeat["episodes"]["seed"] == 0 and "60 of the seed's episodes cached" in estimate_line(repeat)


def test_a_run_says_its_estimate_first_and_reports_it_beside_its_spend_and_a_repeat_knows_its_cache(tmp_path):
    import toybench
    from test_loop import Console, make_config

    from evolver import plugins
    from evolver.loop import run_loop
    from evolver.programs import ProgramRepo
    from evolver.run import Run
    from evolver.store import Store
    plugins.load_local(Path(__file__).parent / "toybench.py")
    cfg = make_config(tmp_path, toybench.make_rule(), iterations=1)
    store = Store(Path(cfg.store) / "evolver.duckdb")
    repo = ProgramRepo(Path(cfg.store))
    try:
        estimates, forecasts = [], []
        for _ in range(2):
            run = Run(cfg, store, repo, console=Console())
            try:
                summary = run_loop(run)
            finally:
                run.close()
            est = summary["estimate"]
            estimates.append(est)
            line = next(i for i, text in enumerate(run.console.lines) if text.startswith("estimate: ~"))
            assert line == 1 and run.console.lines[0].startswith("plan: at most")
            assert est["rate"]["n"] == 4 and est["rate"]["calls"] == 1.0 and est["tokens"] > 0
            assert "Before its search it estimated ~" in Path(summary["report"]).read_text()
            # the first candidate's smoke episode priced the search again, before any dev episode of its own
            revised = est["revised"]
            assert revised["candidates"] == 1 and revised["ratio"] >= 0
            said = next(i for i, text in enumerate(run.console.lines) if text.startswith("estimate revised: ~"))
            judged = next(i for i, text in enumerate(run.console.lines) if " admitted" in text or " discarded" in text)
            assert line < said < judged
            assert "Once its first candidates had played their smoke episodes" in Path(summary["report"]).read_text()
            (f,) = summary["forecasts"]  # one iteration: said once, after it, with nothing left to run
            forecasts.append(f)
            assert f["after"] == 1 and f["iterations_left"] == 0 and f["spent"] > 0
            assert any(text.startswith("forecast after 1 iteration: ~") for text in run.console.lines)
        first, again = estimates
        assert first["cached"] == 0 and first["ratio"] is None
        # the repeat finds the seed's 4 dev and 4 test episodes in the cache, and the first run's candidates
        # and its pilot rollouts too: nothing of the seed's is left to spend
        assert again["cached"] == 8 and again["ratio"] is not None and again["episodes"]["seed"] == 0
        # the final test is still to play after the first run's iteration; the repeat's seed has it cached
        assert forecasts[0]["test"] > 0 and forecasts[0]["tokens"] > forecasts[0]["spent"]
        assert 0 < forecasts[1]["test"] < forecasts[0]["test"]
    finally:
        store.close()


def test_a_priced_executor_gets_a_cost_and_a_cap_below_the_estimate_is_named():
    from evolver.config import BudgetConfig, Price
    from evolver.estimate import over_caps
    cfg = loop(iterations=1, candidates_per_iteration=1, max_wall_s=10_000)
    rate = Rate(tokens=1000.0, calls=10.0, seconds=10.0, n=6, completion=0.1)
    est = estimate(cfg, splits(), 1, rate, cached=0, elapsed=0, ratio=None, smoke_steps=5, max_steps=50,
                   price=Price(input=1.0, output=10.0))
    tokens = est["tokens"]  # 66 + 24.1 + 36 episodes of 1000 tokens, 10% of them replies
    assert tokens == 126_100 and est["cost"] == round((tokens * 0.9 * 1.0 + tokens * 0.1 * 10.0) / 1e6, 6)
    assert "in cost" in estimate_line(est)
    caps = BudgetConfig(tokens=100_000, calls=10_000)
    assert over_caps(est, caps) == ["budget.tokens = 100000"]
    assert over_caps(est, BudgetConfig()) == []


def test_the_forecast_prices_the_iterations_left_at_what_they_cost_so_far():
    cfg = loop(iterations=3, max_wall_s=540)
    # 2 iterations done at 300 s, 100 s each: a third fits (400 < 540); 50k spent, 20k of it in the search
    f = forecast(50_000, 20_000, 2, cfg, elapsed=300, typical_s=100, test_tokens=5_000)
    assert f == {"tokens": 65_000, "spent": 50_000, "iterations_left": 1, "per_iteration": 10_000, "test": 5_000}
    assert forecast(50_000, 20_000, 2, cfg, elapsed=450, typical_s=100, test_tokens=0)["iterations_left"] == 0
    assert "forecast after 2 iterations: ~65,000 tokens in all" in forecast_line(2, f)


def test_an_iteration_counts_the_candidates_its_proposers_build():
    from evolver.loop import built
    one, many = type("One", (), {"drafts": 1})(), type("Many", (), {})()
    cfg = loop(candidates_per_iteration=5)
    assert built(cfg, {"miner": one}) == 1  # one mined skill a call, whatever its share of 5
    assert built(cfg, {"miner": one, "evoskill": many}) == 1 + 2  # shares of 3 and 2: the first builds one
    assert built(loop(candidates_per_iteration=1), {"a": many, "b": one}) == 1  # the second's share is 0
    few = estimate(cfg, splits(), 1, RATE, cached=0, elapsed=0, ratio=None, smoke_steps=5, max_steps=50,
                   candidates=1)
    assert few["candidates"] == 1 and few["episodes"]["search"] == round(1 * 24.1 + 36, 1)


def _episode(category: str, tokens: list[int], smoke: bool = False):
    from evolver.types import Episode, Step
    task = Task(id=f"b/train/{category}", benchmark="b", split="train", category=category, prompt="p")
    steps = [Step(index=i, prompt="", output="", action="a", observation="", prompt_tokens=t)
             for i, t in enumerate(tokens)]
    ep = Episode(task=task, program_id="p", program_hash="h", model="m", seed=0, steps=steps,
                 purpose="smoke" if smoke else "train")
    ep.tally()
    return ep


def test_the_smoke_episodes_price_candidates_against_the_seeds_first_moves_in_their_category():
    from evolver.estimate import smoke_ratio
    pilot = [_episode("c0", [100] * 10), _episode("c1", [400] * 10), _episode("c1", [200] * 3)]
    # the seed's first 5 moves in c1: 2000 and 600 tokens, 1300 an episode; the smoke spent 650
    assert smoke_ratio([_episode("c1", [130] * 5, smoke=True)], pilot, 5) == 0.5
    assert smoke_ratio([_episode("c0", [0] * 5, smoke=True)], pilot, 5) == 0.0  # moves played without the model
    assert smoke_ratio([_episode("c9", [50] * 5, smoke=True)], pilot, 5) == 250 / ((500 + 2000 + 600) / 3)
    assert smoke_ratio([], pilot, 5) is None and smoke_ratio([_episode("c0", [1], smoke=True)], [], 5) is None


def test_the_revised_estimate_prices_the_search_by_the_smoke_and_counts_the_first_iterations_candidates():
    from evolver.estimate import revise, revised_line
    cfg = loop(iterations=1, candidates_per_iteration=3, max_wall_s=10_000)
    est = estimate(cfg, splits(), 1, RATE, cached=0, elapsed=60, ratio=None, smoke_steps=5, max_steps=50)
    free = revise(cfg, splits(), 1, est, 0.0, 1, 5, 50)
    assert free["tokens"] == est["seed_tokens"] == 66_000 and free["candidates"] == 1  # candidates cost nothing
    half = revise(cfg, splits(), 1, est, 0.5, 2, 5, 50)
    assert half["tokens"] == 66_000 + round(0.5 * (2 * 24.1 + 36) * 1000) < est["tokens"]
    line = revised_line(est | {"revised": half})
    assert line.startswith("estimate revised: ~108,100 tokens") and "2 candidates an iteration at 0.50x" in line


def test_proposers_that_price_their_candidates_set_the_ratio_weighted_by_what_each_builds():
    from evolver.estimate import mixed
    from evolver.loop import _prices
    assert mixed({"miner": 0.1}, {"miner": 1}, None) == 0.1
    # the miner builds 1 at 0.1x, evoskill 2 unpriced: at the store's 0.5x, else at the seed's rate
    assert mixed({"miner": 0.1, "evoskill": None}, {"miner": 1, "evoskill": 2}, 0.5) == (0.1 + 2 * 0.5) / 3
    assert mixed({"miner": 0.1}, {"miner": 1, "evoskill": 2}, None) == (0.1 + 2) / 3
    assert mixed({}, {"evoskill": 3}, 0.7) == 0.7 and mixed({"miner": None}, {"miner": 1}, None) is None
    assert mixed({"miner": 0.2}, {"miner": 0}, 0.7) == 0.7  # a proposer that builds nothing weighs nothing

    class Cheap:
        def price(self, seed, pilot):
            return 0.05 * len(pilot)

    class Broken:
        def price(self, seed, pilot):
            raise RuntimeError("no notes")
    logged = []
    run = type("Run", (), {"log": staticmethod(logged.append), "status": ""})()
    got = _prices(run, None, [1, 2], {"miner": Cheap(), "evoskill": type("E", (), {})(), "other": Broken()})
    assert got == {"miner": 0.1, "other": None}  # evoskill has no price method: not asked
    assert any("other could not price its candidates (RuntimeError: no notes)" in line for line in logged)
    cfg = loop(iterations=1, candidates_per_iteration=1, max_wall_s=10_000)
    est = estimate(cfg, splits(), 1, RATE, cached=0, elapsed=60, ratio=0.1, smoke_steps=5, max_steps=50,
                   priced={"miner": 0.1})
    assert est["tokens"] == 66_000 + round(0.1 * (24.1 + 36) * 1000)
    assert "0.10x the seed's rate, as their proposers priced them (miner 0.10x)" in estimate_line(est)
    from evolver.report import estimate_lines
    lines = estimate_lines({"estimate": est, "spend": {"executor": {"tokens": 70_000, "calls": 1}}})
    assert "It priced candidates at 0.10x the seed's rate: as their proposers said (miner 0.10x)." in lines[1]


def test_the_revision_keeps_a_proposers_own_price_and_prices_the_others_by_their_smoke():
    from evolver.estimate import revise, revised_line, revised_ratio
    assert revised_ratio(["miner"], {"miner": 0.1}, None) == 0.1  # one smoke episode says less than the trial
    assert revised_ratio(["miner", "evoskill", "evoskill"], {"miner": 0.1}, 1.6) == (0.1 + 3.2) / 3
    assert revised_ratio(["evoskill"], {"miner": 0.1}, None) is None and revised_ratio([], {}, 1.0) is None
    cfg = loop(iterations=1, candidates_per_iteration=3, max_wall_s=10_000)
    est = estimate(cfg, splits(), 1, RATE, cached=0, elapsed=60, ratio=0.1, smoke_steps=5, max_steps=50,
                   candidates=1, priced={"miner": 0.1})
    again = revise(cfg, splits(), 1, est, 0.1, 1, 5, 50) | {"kept": ["miner"], "all_kept": True}
    assert again["tokens"] == est["tokens"]
    assert "at 0.10x the seed's rate, priced by miner's own price before the search)" in revised_line(
        est | {"revised": again})
    mixed_line = revised_line(est | {"revised": again | {"all_kept": False}})
    assert mixed_line.endswith("priced by miner's own price before the search, the others' smoke episodes)")
