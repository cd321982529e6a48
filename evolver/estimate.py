"""What a run will most likely spend, said before its search starts, beside the ceiling of
:func:`evolver.playing.planned`.

The first iteration's rollouts are the seed's episodes on a training batch; the run plays them first
(the iteration finds them in the cache), and their means per episode (tokens, model calls, seconds)
price every episode the loop will play:
  - the seed's dev and test episodes, and the first iteration's rollouts, at the seed's rate, less
    what the evaluation cache already holds (a repeat run in the same store plays none of them again);
  - every candidate's smoke episode and dev episodes, the later rollouts and the best's test
    episodes, at the seed's rate times ``ratio``: what its proposers say their candidates will cost
    per episode against the seed (a proposer's ``price``: the skill miner plays its first notes on
    training tasks it did not mine, with no model, and counts the moves they leave to the model),
    each weighted by the candidates it builds; for the others, what candidates cost against their
    parent in this store's earlier runs of the same benchmark and executor model, or 1 (a candidate
    costs what its parent does) where there are none;
  - as many iterations as the wall-time budget leaves room for at the pilot's seconds per episode (a
    rough count: a lockstep plays a bigger batch faster per episode, so no wall time is promised).
What proposers spend themselves (a trainer's rollouts, a proposer's own model calls) is not counted.

Once the first iteration's candidates have played their smoke episodes, and before any of them plays a
dev episode, the run says it again (:func:`revise`): candidates priced by those smoke episodes against
the seed's own first moves (:func:`smoke_ratio`), except those whose proposer priced them before the
search (:func:`revised_ratio`), as many an iteration as the first one built.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from evolver.budget import cost_of
from evolver.seeding import SEED_ID


@dataclass(frozen=True)
class Rate:
    """Means per episode of ``n`` episodes: tokens (prompt and reply), model calls (steps), wall seconds,
    and the reply's share of the tokens (``completion``)."""

    tokens: float
    calls: float
    seconds: float
    n: int
    completion: float = 0.0

    @classmethod
    def of(cls, episodes: list, seconds: float) -> "Rate":
        n = max(1, len(episodes))
        prompt = sum(e.prompt_tokens or 0 for e in episodes) / n
        reply = sum(e.completion_tokens or 0 for e in episodes) / n
        return cls(prompt + reply, sum(len(e.steps) for e in episodes) / n, seconds / n, len(episodes),
                   reply / (prompt + reply) if prompt + reply else 0.0)


def history_ratio(store, run_id: str, benchmark: str, model: str) -> float | None:
    """Tokens per episode of other programs / the seed's, over the dev and test episodes of this store's
    other runs on ``benchmark`` with executor ``model``; None without both."""
    rows = store.query(
        "SELECT program_id = ? AS seed, avg(prompt_tokens + completion_tokens) FROM episodes "
        "WHERE run_id <> ? AND benchmark = ? AND model IS NOT DISTINCT FROM ? AND purpose = 'eval' GROUP BY 1",
        [SEED_ID, run_id, benchmark, model])[1]
    by = {bool(r[0]): float(r[1] or 0) for r in rows}
    if True not in by or False not in by or by[True] <= 0:
        return None
    return by[False] / by[True]


def mixed(priced: dict[str, float | None], built: dict[str, int], base: float | None) -> float | None:
    """Candidates' cost against the seed: each proposer's ``priced`` ratio (``base`` where it gave none,
    1 where that is None too) weighted by the candidates it builds (``built``); ``base`` when no
    proposer priced its own."""
    if not any(priced.get(name) is not None for name in built) or not sum(built.values()):
        return base
    fallback = 1.0 if base is None else base
    return sum(n * (fallback if priced.get(name) is None else priced[name]) for name, n in built.items()) / sum(
        built.values())


def estimate(cfg, data: dict, k: int, rate: Rate, cached: int, elapsed: float, ratio: float | None,
             smoke_steps: int, max_steps: int, pilot_played: int | None = None, price=None,
             candidates: int | None = None, priced: dict | None = None) -> dict:
    """The expected spend of a run (module doc): ``cfg`` its loop config, ``data`` its splits, ``k``
    episodes per dev or test task, ``rate`` the pilot's, ``cached`` how many of the seed's dev and test
    episodes the cache already holds, ``elapsed`` the seconds spent before the search, ``ratio`` the
    candidates' cost against their parent (None: 1), ``pilot_played`` how many of the pilot's rollouts
    were played (not found in the cache; None: all), ``price`` the executor's (None: free), ``candidates``
    how many an iteration builds (None: ``cfg.candidates_per_iteration``), ``priced`` the proposers
    that priced their own candidates, by name (what ``ratio`` was mixed from, for the line)."""
    r = 1.0 if ratio is None else ratio
    n = cfg.candidates_per_iteration if candidates is None else candidates
    dev, test = len(data["dev"]) * k, len(data["test"]) * k
    batch = cfg.train_per_category * max(1, len({t.category for t in data["train"]}))
    seed_eps = max(0, dev + test - cached)
    smoke = min(1.0, smoke_steps / max(1, max_steps))  # a smoke episode is cut after a few moves
    per_candidate = smoke + dev
    first = rate.seconds * (dev - min(dev, cached)) + elapsed
    one_iteration = rate.seconds * (batch + r * n * per_candidate)
    iterations = 1
    while iterations < cfg.iterations and first + (iterations + 1) * one_iteration < cfg.max_wall_s:
        iterations += 1
    finals = 1 if cfg.test_frontier is False else cfg.frontier_capacity
    # the first rollouts are the pilot: already spent when this is said, unless the cache had them
    seed_part = seed_eps + (batch if pilot_played is None else pilot_played)
    search = iterations * n * per_candidate + (iterations - 1) * batch + finals * test
    episodes = seed_part + r * search
    tokens = episodes * rate.tokens
    cost = 0.0 if price is None else cost_of(price, round(tokens * (1 - rate.completion)),
                                             round(tokens * rate.completion))
    return {"tokens": round(tokens), "calls": round(episodes * rate.calls), "cost": round(cost, 6),
            "seed_tokens": round(seed_part * rate.tokens),
            "episodes": {"seed": seed_part, "search": round(search, 1)}, "iterations": iterations,
            "ratio": ratio, "rate": asdict(rate), "cached": cached, "candidates": n,
            "elapsed": round(elapsed, 3), "pilot_played": pilot_played, "priced": dict(priced or {})}


def smoke_ratio(smokes: list, pilot: list, smoke_steps: int) -> float | None:
    """What candidates cost against the seed, from their smoke episodes (``smokes``, each cut after
    ``smoke_steps`` moves): their mean tokens against the seed's in the first ``smoke_steps`` steps of
    its ``pilot`` episodes (with steps) on the smoke task's category, or on any where it has none there.
    None without either."""
    if not smokes:
        return None
    category = smokes[0].task.category
    ref = [e for e in pilot if e.steps and e.task.category == category] or [e for e in pilot if e.steps]
    seed = sum(s.prompt_tokens + s.completion_tokens for e in ref for s in e.steps[:smoke_steps]) / max(1, len(ref))
    if seed <= 0:
        return None
    return sum((e.prompt_tokens or 0) + (e.completion_tokens or 0) for e in smokes) / len(smokes) / seed


def revised_ratio(proposers: list[str], priced: dict[str, float], smoke: float | None) -> float | None:
    """Candidates' cost once the first ones (built by ``proposers``, one name each) have played their
    smoke episodes: a candidate whose proposer priced it before the search (``priced``: its trial
    played dozens of tasks) keeps that price; the others are priced by the ``smoke`` ratio, one short
    episode each. None where some need the smoke ratio and there is none."""
    if not proposers or (smoke is None and any(p not in priced for p in proposers)):
        return None
    return sum(priced[p] if p in priced else smoke for p in proposers) / len(proposers)


def revise(cfg, data: dict, k: int, est: dict, ratio: float, candidates: int, smoke_steps: int,
           max_steps: int, price=None) -> dict:
    """:func:`estimate` again from what ``est`` was priced by, its candidates now at ``ratio`` of the
    seed's rate and ``candidates`` an iteration: the figures a run says once its first candidates have
    played their smoke episodes."""
    again = estimate(cfg, data, k, Rate(**est["rate"]), est["cached"], est.get("elapsed", 0.0), ratio,
                     smoke_steps, max_steps, est.get("pilot_played"), price, candidates)
    return {key: again[key] for key in ("tokens", "calls", "cost", "iterations", "ratio", "candidates")}


def over_caps(est: dict, caps) -> list[str]:
    """The ``[budget]`` totals the estimate passes (``caps``: a :class:`evolver.config.BudgetConfig`)."""
    return [f"budget.{name} = {cap:g}" for name, cap in (("tokens", caps.tokens), ("calls", caps.calls),
                                                           ("cost", caps.cost))
            if cap is not None and est[name] > cap]


def revised_line(est: dict) -> str:
    """What :func:`revise` says, as the run prints it before its candidates' dev episodes."""
    r = est["revised"]
    kept = r.get("kept") or []
    how = ("the first ones' smoke episodes against the seed's first moves" if not kept else
           f"{', '.join(kept)}'s own price before the search" + ("" if r.get("all_kept") else
                                                                  ", the others' smoke episodes"))
    return (f"estimate revised: ~{r['tokens']:,} tokens and ~{r['calls']:,} model calls in {r['iterations']} "
            f"iteration{'s' if r['iterations'] != 1 else ''} ({r['candidates']} candidate"
            f"{'s' if r['candidates'] != 1 else ''} an iteration at {r['ratio']:.2f}x the seed's rate, priced by "
            f"{how})")


def priced_by(est: dict) -> str:
    """The proposers that priced their own candidates in ``est``, each with its price ("" for none)."""
    return ", ".join(f"{name} {r:.2f}x" for name, r in (est.get("priced") or {}).items())


def estimate_line(est: dict) -> str:
    """What :func:`estimate` says, as the run prints it before its search starts."""
    by = priced_by(est)
    why = ("candidates at the seed's rate: no earlier run here to say otherwise" if est["ratio"] is None
           else f"candidates at {est['ratio']:.2f}x the seed's rate, as their proposers priced them ({by})" if by
           else f"candidates at {est['ratio']:.2f}x the seed's rate, as in this store's earlier runs")
    cached = f", {est['cached']} of the seed's episodes cached" if est["cached"] else ""
    cost = f", ~{est['cost']:.4g} in cost" if est.get("cost") else ""
    seed = est.get("seed_tokens", 0)
    return (f"estimate: ~{est['tokens']:,} tokens (the seed's own episodes ~{seed:,}, the search "
            f"~{est['tokens'] - seed:,}) and ~{est['calls']:,} model calls{cost} in {est['iterations']} "
            f"iteration{'s' if est['iterations'] != 1 else ''} "
            f"(the seed's {est['rate']['n']} rollouts priced it: {est['rate']['tokens']:.0f} tokens and "
            f"{est['rate']['calls']:.1f} calls an episode; {why}{cached}); proposers' own spend not counted")


def forecast(spent: int, search_spent: int, done: int, cfg, elapsed: float, typical_s: float,
             test_tokens: float) -> dict:
    """The run's spend as it stands after ``done`` iterations: ``spent`` tokens so far (every role),
    ``search_spent`` of them in those iterations, as many more iterations as the loop will start (its
    wall-time rule: each judged at ``typical_s``, the mean so far) at the mean spend of one so far, and
    ``test_tokens`` for the final test (the seed's and the best's episodes at their dev rates)."""
    more, t = 0, elapsed
    while done + more < cfg.iterations and t + typical_s < cfg.max_wall_s:
        more, t = more + 1, t + typical_s
    per = search_spent / max(1, done)
    return {"tokens": round(spent + more * per + test_tokens), "spent": spent, "iterations_left": more,
            "per_iteration": round(per), "test": round(test_tokens)}


def forecast_line(done: int, f: dict) -> str:
    return (f"forecast after {done} iteration{'s' if done != 1 else ''}: ~{f['tokens']:,} tokens in all "
            f"(spent {f['spent']:,}; {f['iterations_left']} more at ~{f['per_iteration']:,} each, the final "
            f"test ~{f['test']:,})")
