"""The end of a run: the seed, the frontier and a no-evolution baseline on the held-out test split.

Best-of-N answers "how much of the gain does evolution add over simply trying again?": the seed
program played N times on dev, each time sampled with another seed (N = the candidates the run
evaluated on dev, so both had as many tries), the seed that scored best on dev then played on test.
Selection on dev flatters both alike; on test only a real gain survives. The seed, the evolved best
and the baseline are compared per task on the same test tasks (paired bootstrap at ``loop.gate_level``).
"""
from __future__ import annotations

from evolver import plugins
from evolver.evaluate import Job, summarize
from evolver.gate import compare
from evolver.playing import baseline_jobs, evaluate_programs, per_task, play, progress_status, tries
from evolver.seeding import SEED_ID
from evolver.selection import complete_members
from evolver.run import Run
from evolver.types import Program



def finish(run: Run, seed: Program, data: dict) -> dict:
    """Evaluate on test (never seen by selection), compare paired, write the report. Returns the summary."""
    from evolver.report import hand_written_programs, with_lines, write_report

    cfg = run.config.loop
    if len(run.frontier.members) > 1:  # which is best is judged on the whole dev split
        complete_members(run, run.iteration, data["dev"])
    baseline = best_of_n(run, data["dev"]) if cfg.best_of_n else None
    run.status = "final evaluation on test"
    best = run.frontier.best().program_id
    ids = tested(run.frontier.ids(), best, cfg.test_frontier)
    programs = [run.repo.checkout(pid) for pid in ids]
    # The baseline plays in the same lockstep as the seed's greedy test episodes (same weights).
    extra = [Job(run.context(seed), data["test"], baseline["seed"], purpose="baseline",
                 temperature=cfg.baseline_temperature)] if baseline is not None else []
    evals, values, extra_lists = evaluate_programs(run, programs, data["test"], "test", run.iteration + 1,
                                                   extra=extra)
    summary = {"test": {ev.program_id: ev.metrics() | {"per_category": ev.per_category} for ev in evals},
               "baseline": SEED_ID, "best": best,
               "frontier": run.frontier.to_dict(), "tokens": dict(run.tokens),
               "spend": run.models.ledger.spend(),
               "wall_s": run.elapsed(), "iterations": run.iteration + 1,
               "plan": run.plan,
               "estimate": run.estimate, "forecasts": run.forecasts,
               "episodes_stored": run.store.query("SELECT count(*) FROM episodes WHERE run_id = ?", [run.id])[1][0][0],
               "hand_written": hand_written_programs(run.repo, ids)}
    scores = {ev.program_id: v["score"] for ev, v in zip(evals, values)}
    pairs = {"best_vs_seed": (best, SEED_ID)}
    if baseline is not None:
        (eps,) = extra_lists
        ev = summarize(SEED_ID, "test", eps)
        baseline["test"] = ev.metrics() | {"per_category": ev.per_category}
        summary["best_of_n"] = baseline
        scores["best-of-n"] = per_task(eps)["score"]
        pairs |= {"best_of_n_vs_seed": ("best-of-n", SEED_ID), "best_vs_best_of_n": (best, "best-of-n")}
    summary["paired"] = {name: compare(scores[a], scores[b], "bootstrap", cfg.gate_level).to_dict()
                         for name, (a, b) in pairs.items()}
    with_lines(summary)
    summary["report"] = str(write_report(run, summary))
    run.store.update_run(run.id, status="finished", summary=summary)
    plugins.hook().on_run_end(run=run, summary=summary)
    return summary


def tested(members: list[str], best: str, whole_frontier: bool) -> list[str]:
    """The programs the final test plays: the seed, then the best (``loop.test_frontier``: every member)."""
    return [SEED_ID] + [m for m in (members if whole_frontier else [best]) if m != SEED_ID]



def best_of_n(run: Run, dev: list) -> dict:
    """The seed program sampled with N job seeds (:func:`baseline_jobs`) on dev, all N in one lockstep;
    returns N, each seed's dev score and the best seed (the first of equals). N = :func:`tries`. With
    N = 1 there is nothing to pick on dev, and the one sampled seed goes straight to test. Seeds already
    played beside the candidates on dev (``evolver.selection.evaluate_and_select``) come from the episode
    cache."""
    cfg = run.config.loop
    n = max(1, tries(run))
    seeds = [cfg.episode_seed + k for k in range(n)]
    if n == 1:  # one try: nothing to pick on dev
        return {"program": SEED_ID, "n": 1, "temperature": cfg.baseline_temperature, "seeds": seeds,
                "dev_scores": [], "seed": seeds[0], "dev": None}
    run.status = f"best-of-{n} baseline on dev"
    lists = play(run, baseline_jobs(run, dev, n), seed=seeds[0], purpose="baseline", store=run.store,
                 progress=progress_status(run, f"best-of-{n} on dev"))
    dev_scores = [summarize(SEED_ID, "dev", eps).score for eps in lists]
    k = max(range(n), key=lambda i: (dev_scores[i], -i))
    run.log(f"best-of-{n} baseline: seed {seeds[k]} scores {dev_scores[k]:.3f} on dev "
            f"(the {n} seeds: {min(dev_scores):.3f} to {max(dev_scores):.3f})")
    return {"program": SEED_ID, "n": n, "temperature": cfg.baseline_temperature, "seeds": seeds,
            "dev_scores": dev_scores, "seed": seeds[k], "dev": dev_scores[k]}
