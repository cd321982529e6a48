"""The core loop, one iteration top to bottom:

parent (from the frontier) -> rollouts on a training batch -> failures -> proposals (each in its own
worktree) -> cheap checks (skills, sandboxed harness import, leakage audits, one smoke episode with the
harness in a sandboxed subprocess) -> staged evaluation on dev (a probe of one task per category, half of
each, then the whole split for candidates neither clearly worse nor already certain to be admitted), all
candidates in one batched lockstep, cache first
-> frontier admits or rejects (a paired test against the members on the same dev tasks:
evolver/frontier.py), tags move -> events to plugins.

At the end (evolver/final.py) the seed, every frontier member and a best-of-N baseline (the seed
sampled as many times as the run evaluated candidates) are evaluated on the held-out test split,
which selection never saw. Every state change is in the store before the next one starts, so a run
killed at any point resumes (``evolver run --resume``) from its last finished iteration, and the
evaluation cache keeps any episode from being played or counted twice.
"""
from __future__ import annotations

import dataclasses
import time
import traceback
from pathlib import Path

from evolver import monitor, plugins
from evolver.budget import BudgetExceeded
from evolver.checks import audit_harness_code, audit_leakage, check_harness_import, check_skill_files
from evolver.config import check_config, sized
from evolver.errors import RepoDamagedError, StoreIOError
from evolver.estimate import (Rate, estimate, estimate_line, forecast, forecast_line, history_ratio, mixed,
                               over_caps, revise, revised_line, revised_ratio, smoke_ratio)
from evolver.evaluate import run_episodes, sample_stratified
from evolver.final import finish
from evolver.frontier import Frontier
from evolver.playing import (episodes_per_task, evaluate_programs, executor, plan_line, planned, play,
                             progress_status, splits)
from evolver.proposers import Draft, ProposeContext
from evolver.run import Run
from evolver.seeding import SEED_ID, ensure_seed
from evolver.selection import evaluate_and_select, retag, transition
from evolver.types import Candidate, Episode, Program, Proposal

def run_loop(run: Run) -> dict:
    """Run (or resume) the search, then the final test evaluation. Returns the summary."""
    check_config(run.config)
    # Split sizes left unset come to the same totals on any benchmark, whatever its number of categories.
    run.config = run.config.model_copy(update={"loop": sized(run.config.loop, len(run.benchmark.categories))})
    cfg = run.config.loop
    run.record()
    seed = ensure_seed(run)
    run.repo.gc_worktrees()  # worktrees of candidates a killed run left behind
    data = splits(run)
    hook = plugins.hook()
    hook.on_run_start(run=run)
    proposers = {name: plugins.make("proposer", name, run=run, **run.config.plugins.get(name, {}))
                 for name in run.config.proposers}

    for row in run.store.proposals(run.id):
        if row["status"] == "proposed":  # built by an iteration that was killed: it will be redone
            run.store.update_proposal(row["proposal_id"], "abandoned", "the run was stopped before its evaluation")
    start = run.store.last_finished_iteration(run.id) + 1
    run.plan = planned(run, data)
    kept = (run.store.get_run(run.id) or {}).get("summary") or {}  # what a stopped run kept of its start
    if start > 0:
        last = next(r for r in run.store.iterations(run.id) if r["iteration"] == start - 1)
        run.frontier = Frontier.from_dict(last["summary"]["frontier"])
        before = _spent_before(run)
        run.started -= before  # the wall-time budget counts the work done before the stop, not the pause
        run.log(f"resuming run {run.id} at iteration {start} ({before:.0f}s of work before the stop)")
        run.estimate = kept.get("estimate")
    else:
        run.log(plan_line(run.plan))
        # Said once: a run resumed before its first iteration keeps the estimate it made at its start.
        run.estimate = kept.get("estimate") or _estimate(run, seed, data, proposers)
        run.store.update_run(run.id, summary=kept | {"estimate": run.estimate})
        run.log(estimate_line(run.estimate))
        over = over_caps(run.estimate, run.config.budget)
        if over:
            run.log(f"the estimate passes {', '.join(over)}: the run will likely stop there, with a partial "
                    "report, before its final test")
        (ev,), (values,), _ = evaluate_programs(run, [seed], data["dev"], "dev", -1)
        run.frontier.consider(SEED_ID, ev.metrics(), -1, per_task=values)
        run.store.add_frontier_event(run.id, -1, SEED_ID, "seed", ev.metrics(), "the seed program")
        retag(run)
    idle = _iterations_without_admission(run)
    durations: list[float] = []
    searched = _spent(run)  # tokens before the first iteration of this session: the search's start
    for it in range(start, cfg.iterations):
        stop = _budget_exhausted(run, idle, sum(durations) / len(durations) if durations else 0.0, first=it == 0)
        if stop:
            run.log(f"stopping: {stop}")
            break
        began = time.time()
        admitted = iterate(run, it, proposers, data)
        # The first iteration's rollouts were played before the seed's evaluation, as the estimate's pilot:
        # their time is still that iteration's, or the wall budget would take iterations to be shorter.
        pilot = (run.estimate or {}).get("pilot_s", 0.0) if it == 0 else 0.0
        durations.append(time.time() - began + pilot)
        idle = 0 if admitted else idle + 1
        _forecast(run, it, data, durations, searched)
    return finish(run, seed, data)


def _rollouts(run: Run, parent: Program, data: dict, it: int) -> list:
    """Iteration ``it``'s rollouts of ``parent`` on its stratified training batch (from the cache where
    they were played before: the seed's first ones are the estimate's pilot)."""
    cfg = run.config.loop
    batch = sample_stratified(data["train"], cfg.train_per_category, seed=cfg.episode_seed * 1000 + it)
    return run_episodes(run.context(parent), run.benchmark, executor(run, parent), batch,
                        seed=cfg.episode_seed, purpose="train", store=run.store, run=run,
                        progress=progress_status(run, f"iteration {it} rollouts"))


def _shares(cfg, names: list[str]) -> dict[str, int]:
    """Each proposer's share of an iteration's ``candidates_per_iteration``, in order."""
    n = cfg.candidates_per_iteration
    return {name: n // len(names) + (i < n % len(names)) for i, name in enumerate(names)}


def built(cfg, proposers: dict) -> int:
    """How many candidates an iteration builds: each proposer's share, or fewer where it says one call
    builds fewer (its ``drafts``)."""
    return sum(_built_by(cfg, proposers).values())


def _built_by(cfg, proposers: dict) -> dict[str, int]:
    share = _shares(cfg, list(proposers)) if proposers else {}
    return {name: min(n, getattr(proposers[name], "drafts", None) or n) for name, n in share.items()}


def _estimate(run: Run, seed: Program, data: dict, proposers: dict) -> dict:
    """The run's expected spend (:mod:`evolver.estimate`), priced by the first iteration's rollouts of
    the seed, played now, and the cache's and this store's earlier runs' share of the rest, for as many
    candidates an iteration as :func:`built` counts."""
    cfg = run.config.loop
    run.status = "estimating: the first rollouts of the seed"
    began = time.time()
    pilot = _rollouts(run, seed, data, 0)
    took = time.time() - began
    full = run.store.episodes(ids=[e.id for e in pilot], with_steps=True) or pilot
    # Cached rollouts took no time now: their stored walls say what a batch of them takes.
    seconds = took if any(not e.cached for e in pilot) else max((e.wall_s for e in pilot), default=0.0)
    model = executor(run, seed).model
    k = episodes_per_task(run)
    cached = k * (len(data["dev"]) + len(data["test"])) - _unplayed(run, seed, data["dev"] + data["test"])
    ratio = history_ratio(run.store, run.id, data["dev"][0].benchmark if data["dev"] else "", model)
    priced, by = _prices(run, seed, full, proposers), _built_by(cfg, proposers)
    return estimate(cfg, data, k, Rate.of(full, seconds), cached, run.elapsed(), mixed(priced, by, ratio),
                    SMOKE_STEPS, _step_limit(run), sum(not e.cached for e in pilot),
                    run.models.price("executor"), sum(by.values()),
                    priced={n: r for n, r in priced.items() if r is not None}) | {"pilot_s": round(took, 3)}


def _prices(run: Run, seed: Program, pilot: list, proposers: dict) -> dict[str, float | None]:
    """What each proposer with a ``price`` method says its candidates will cost an episode against the
    seed, from the ``pilot`` (with steps); one that fails says nothing (its error is logged)."""
    out: dict[str, float | None] = {}
    for name, proposer in proposers.items():
        if callable(getattr(proposer, "price", None)):
            run.status = f"estimating: {name} prices its candidates"
            try:
                value = proposer.price(seed, pilot)
                out[name] = None if value is None else max(0.0, float(value))
            except Exception as exc:  # a proposer's estimate never stops a run
                run.log(f"{name} could not price its candidates ({type(exc).__name__}: {exc}); "
                        "the estimate prices them at the seed's rate")
                out[name] = None
    return out


def _step_limit(run: Run) -> int:
    return max(1, getattr(run.benchmark, "max_steps", 1) or 1)


def _revise(run: Run, data: dict, pilot: list, candidates: list[Candidate]) -> None:
    """Say the estimate again once the first candidates have played their smoke episodes, before any
    dev episode of theirs (:func:`evolver.estimate.revise`), and keep it in the run's summary."""
    priced = run.estimate.get("priced") or {}
    others = [c for c in candidates if c.proposal.proposer not in priced]
    smoke = smoke_ratio([c.smoke for c in others], pilot, SMOKE_STEPS)  # type: ignore[attr-defined]
    names = [c.proposal.proposer for c in candidates]
    ratio = revised_ratio(names, priced, smoke)
    if ratio is None:
        return
    run.estimate = run.estimate | {"revised": revise(
        run.config.loop, data, episodes_per_task(run), run.estimate, ratio, len(candidates), SMOKE_STEPS,
        _step_limit(run), run.models.price("executor")) | {"kept": sorted({n for n in names if n in priced}),
                                                           "all_kept": not others}}
    kept = (run.store.get_run(run.id) or {}).get("summary") or {}
    run.store.update_run(run.id, summary=kept | {"estimate": run.estimate})
    run.log(revised_line(run.estimate))
    over = over_caps(run.estimate["revised"], run.config.budget)
    if over:
        run.log(f"the revised estimate passes {', '.join(over)}: the run will likely stop there, with a partial "
                "report, before its final test")


def _unplayed(run: Run, program: Program, tasks: list) -> int:
    """How many of ``program``'s evaluation episodes on ``tasks`` the cache does not hold yet."""
    cfg, model = run.config.loop, executor(run, program).model
    limit = getattr(run.benchmark, "max_steps", 1) or 1
    keys = [Episode(task=t, program_id=program.id, program_hash=program.hash, model=model, seed=cfg.episode_seed + j,
                    max_steps=t.max_steps or limit).cache_key for t in tasks for j in range(episodes_per_task(run))]
    return len(keys) - len(run.store.cached(keys))


def _spent(run: Run) -> int:
    return sum(v["tokens"] for v in run.models.ledger.spend().values())


def _forecast(run: Run, it: int, data: dict, durations: list[float], searched: int) -> None:
    """Say, and keep for the run's summary, what the run will spend in all as it now stands
    (:func:`evolver.estimate.forecast`): the estimate corrected by what the iterations really cost."""
    spent = _spent(run)
    test = 0.0
    for pid in {SEED_ID, run.frontier.best().program_id}:
        program = run.repo.checkout(pid)  # by content: a cached episode may carry another run's name for it
        rows = run.store.query("SELECT avg(prompt_tokens + completion_tokens) FROM episodes WHERE purpose = 'eval' "
                               "AND split = 'dev' AND program_hash = ? AND model IS NOT DISTINCT FROM ?",
                               [program.hash, executor(run, program).model])[1]
        test += float(rows[0][0] or 0) * _unplayed(run, program, data["test"])
    f = forecast(spent, spent - searched, len(durations), run.config.loop, run.elapsed(),
                 sum(durations) / len(durations), test)
    run.forecasts.append(f | {"after": it + 1})
    run.log(forecast_line(it + 1, f))


def _spent_before(run: Run) -> float:
    """Wall seconds a resumed run worked before it stopped: the seed's evaluation (from the run's start
    to its first iteration) and every finished iteration; the time it lay stopped does not count."""
    its = [r for r in run.store.iterations(run.id) if r["started_at"] is not None]
    row = run.store.get_run(run.id)
    if not its or row is None:
        return 0.0
    spent = max(0.0, (its[0]["started_at"] - row["created_at"]).total_seconds())
    return spent + sum((r["finished_at"] - r["started_at"]).total_seconds() for r in its
                       if r["status"] == "finished" and r["finished_at"] is not None)


def _iterations_without_admission(run: Run) -> int:
    idle = 0
    for row in run.store.iterations(run.id):
        if row["status"] == "finished":
            idle = 0 if (row["summary"] or {}).get("admitted") else idle + 1
    return idle


def _budget_exhausted(run: Run, idle: int, typical_iteration_s: float, first: bool = False) -> str:
    """Why no further iteration starts, or "". The wall-time budget never stops the first iteration: on
    a machine slow or busy enough that the seed's evaluation alone outlasts it, a run that stopped
    there would report the seed against itself and have tried nothing."""
    cfg = run.config.loop
    if idle >= cfg.patience:
        return f"{idle} iterations without an admission (patience {cfg.patience})"
    if not first and run.elapsed() + typical_iteration_s >= cfg.max_wall_s:
        return (f"wall-time budget of {cfg.max_wall_s:.0f}s: {run.elapsed():.0f}s spent, an iteration takes "
                f"~{typical_iteration_s:.0f}s")
    if run.proposer_tokens() >= cfg.max_proposer_tokens:
        return f"proposer token budget of {cfg.max_proposer_tokens} spent"
    if cfg.max_episodes is not None:
        played = episodes_played(run)
        if played >= cfg.max_episodes:
            return f"evaluation budget of {cfg.max_episodes} episodes spent ({played} played)"
    return ""


def episodes_played(run: Run) -> int:
    """Episodes this run has played (stored rows; cache hits are not stored again)."""
    return run.store.query("SELECT count(*) FROM episodes WHERE run_id = ?", [run.id])[1][0][0]


def iterate(run: Run, it: int, proposers: dict, data: dict) -> list[str]:
    """One iteration. Returns the ids admitted to the frontier."""
    cfg = run.config.loop
    run.iteration = it
    history = [r["parent_id"] for r in run.store.iterations(run.id) if r["iteration"] < it]
    selector = plugins.make("selector", cfg.selector)
    parent_member = selector(run.frontier, it, history)
    parent = run.repo.checkout(parent_member.program_id)
    run.store.start_iteration(run.id, it, parent.id)
    run.status = f"iteration {it}: rollouts of {parent.id}"

    episodes = _rollouts(run, parent, data, it)
    failed_ids = {e.id for e in episodes if e.score < cfg.failure_threshold}
    summary = {"parent": parent.id, "train_score": sum(e.score for e in episodes) / max(1, len(episodes)),
               "failures": len(failed_ids), "admitted": [], "candidates": []}
    if not failed_ids:
        # Proposers that learn from something else than this batch's failures (the store, their own
        # samples, demonstrations) still propose; the iteration is skipped only when none does.
        proposers = {n: p for n, p in proposers.items() if not getattr(p, "needs_failures", True)}
        if not proposers:
            return _finish_iteration(run, it, summary, "no failures: skipped")
        asked = f"only {', '.join(proposers)} proposed"
        summary["note"] = f"no failures: {asked}"
        run.log(f"iteration {it}: no failures among {len(episodes)} rollouts; {asked}")
    # Full traces come from the store (cached episodes were loaded without steps).
    full = {e.id: e for e in run.store.episodes(run_id=None, program_id=None, with_steps=True,
                                                 ids=[e.id for e in episodes])}
    failures = [full.get(e.id, e) for e in episodes if e.id in failed_ids]
    successes = sorted((full.get(e.id, e) for e in episodes if e.id not in failed_ids),
                       key=lambda e: -e.score)[:2]

    quiet: dict[str, str] = {}
    drafts = _propose(run, it, proposers, parent, failures, successes, quiet)
    if quiet:
        summary["quiet"] = quiet
    candidates = _check(run, it, parent, drafts, data, shown=[e.task for e in failures])
    if it == 0 and run.estimate and "revised" not in run.estimate:
        _revise(run, data, list(full.values()), candidates)
    admitted = evaluate_and_select(run, it, candidates, data)
    summary["admitted"] = admitted
    summary["candidates"] = [c.id for c in candidates] + [d.candidate_id for d in drafts if d.rejected]
    return _finish_iteration(run, it, summary, "")


def _finish_iteration(run: Run, it: int, summary: dict, note: str) -> list[str]:
    summary["frontier"] = run.frontier.to_dict()
    if note:
        summary["note"] = note
    run.store.finish_iteration(run.id, it, run.frontier.ids(), summary)
    plugins.hook().on_iteration_end(run=run, iteration=it, summary=summary)
    return summary.get("admitted", [])


def _next_id(run: Run) -> str:
    used = {t.split("/", 1)[1] for t in run.repo.tags("program/")} | set(run.repo.branches("cand/"))
    n = len(used)
    while f"p{n:04d}" in used:
        n += 1
    return f"p{n:04d}"


def _propose(run: Run, it: int, proposers: dict, parent: Program, failures, successes,
             quiet: dict) -> list[Draft]:
    """Every proposer's drafts for this iteration; ``quiet`` gets, for each one that built none, the last
    thing it said (its reason) or that it said nothing."""
    cfg = run.config.loop
    history = run.store.proposals(run.id)
    drafts: list[Draft] = []
    share = _shares(cfg, list(proposers))
    for name, proposer in proposers.items():
        if share[name] == 0:
            continue

        def new_draft(operator: str, hypothesis: str = "", parent_id: str | None = None,
                      detail: dict | None = None, _name=name) -> Draft:
            cid = _next_id(run)
            base = parent_id or parent.id
            path = run.repo.new_candidate(cid, base)
            proposal = Proposal(proposer=_name, operator=operator, parent_id=base, hypothesis=hypothesis,
                                detail=detail or {}, id=cid)
            run.store.add_proposal(cid, run.id, it, _name, operator, base, cid, hypothesis, detail or {})
            draft = Draft(cid, proposal, path)
            drafts.append(draft)
            return draft

        ctx = ProposeContext(run=run, iteration=it, parent=parent, failures=failures, successes=successes,
                             history=history, frontier=run.frontier, n=share[name], new_draft=new_draft)
        run.status = f"iteration {it}: {name} proposing"
        before = len(drafts)
        with run.heard() as said:
            try:
                proposer.propose(ctx)
            except (RepoDamagedError, StoreIOError, BudgetExceeded):  # systemic: the run stops (and resumes)
                raise
            except Exception as exc:
                run.log(f"proposer {name} failed: {exc!r}")
                for d in drafts:
                    if d.proposal.proposer == name and not d.rejected:
                        d.reject(f"proposer raised {exc!r}: {traceback.format_exc()[-600:]}")
        if len(drafts) == before:
            why = " ".join(said[-1].split()) if said else "it returned no draft and said nothing"
            quiet[name] = why.removeprefix(f"{name}: ")[:400]
    return drafts


def _reject(run: Run, it: int, draft: Draft, reason: str) -> None:
    cand = Candidate(draft.candidate_id, draft.proposal, f"cand/{draft.candidate_id}", status="rejected",
                     reason=reason, worktree=str(draft.path))
    transition(run, it, cand, "rejected", reason, detail=draft.proposal.detail,
               note=f"rejected: {reason.splitlines()[0]}")


def _check(run: Run, it: int, parent: Program, drafts: list[Draft], data: dict,
           shown: list | None = None) -> list[Candidate]:
    """Commit every draft, then the cheap checks (``shown``: the tasks the proposers saw, whose texts and
    answers a candidate must not copy) and the anti-hack monitor; the smoke episodes of all survivors run
    together."""
    checked: list[Candidate] = []
    shown = shown or []
    task_texts = [t.prompt for t in shown]
    for d in drafts:
        if d.rejected:
            _reject(run, it, d, d.rejected)
            continue
        manifest = {"id": d.candidate_id, "parent": d.proposal.parent_id, "operator": d.proposal.operator,
                    "proposal": d.candidate_id, "proposer": d.proposal.proposer,
                    "hypothesis": d.proposal.hypothesis[:500], "iteration": it,
                    "model": parent.manifest.get("model", "embedded"), **d.manifest}
        first = d.proposal.hypothesis.splitlines()[0][:60] if d.proposal.hypothesis else d.candidate_id
        program = run.repo.commit_candidate(d.candidate_id, manifest, f"{d.proposal.operator}: {first}")
        run.store.add_program(d.candidate_id, run.id, program.commit, program.hash, d.proposal.parent_id,
                              d.proposal.operator, d.candidate_id, program.manifest)
        cand = Candidate(d.candidate_id, d.proposal, f"cand/{d.candidate_id}", program.commit,
                         str(d.path), program.hash, status="proposed")
        cand.program = program  # type: ignore[attr-defined]
        transition(run, it, cand, "proposed", detail=d.proposal.detail)  # the detail as the proposer left it
        parent_program = run.repo.checkout(d.proposal.parent_id)
        parent_root = Path(parent_program.root)
        reason = ("no change from its parent" if program.hash == parent_program.hash else
                  check_skill_files(Path(d.path), task_texts=task_texts, parent_root=parent_root) or
                  check_harness_import(Path(d.path)) or
                  audit_leakage(Path(d.path), d.forbidden, d.forbidden_sequences, parent_root, tasks=shown) or
                  audit_harness_code(Path(d.path), parent_root))
        if not reason:
            reason, verdict = monitor.verdict(lambda: run.backend("judge"), Path(d.path), parent_root,
                                              run.config.loop.monitor)
            if verdict:  # kept whatever the judge said: the report counts flags confirmed and cleared
                d.proposal.detail = {**(d.proposal.detail or {}), "monitor": verdict}
                run.store.update_proposal(d.candidate_id, "proposed", "", detail=d.proposal.detail)
        if reason:
            _reject(run, it, d, reason)
        else:
            checked.append(cand)
    smokes = _smoke(run, it, checked, data)
    survivors = []
    drafts_by_id = {d.candidate_id: d for d in drafts}
    for cand, (ep,) in zip(checked, smokes):
        if ep.error:  # the whole error, traceback included: it is what the next proposal learns from
            _reject(run, it, drafts_by_id[cand.id], f"smoke episode failed: {ep.error.strip()}")
        else:
            cand.status = "checked"
            cand.smoke = ep  # type: ignore[attr-defined]
            survivors.append(cand)
    return survivors


SMOKE_STEPS = 5  # a harness or skill that cannot play fails within its first moves; the rest is the probe's


def _smoke(run: Run, it: int, checked: list[Candidate], data: dict) -> list[list]:
    """One smoke episode each, on a training task, cut after :data:`SMOKE_STEPS` moves, all in one
    batch: a candidate that cannot play is out."""
    if not checked:
        return []
    cfg = run.config.loop
    run.status = f"iteration {it}: smoke episodes" + (" (sandboxed)" if cfg.sandbox_harness else "")
    tasks = [dataclasses.replace(t, max_steps=min(t.max_steps or SMOKE_STEPS, SMOKE_STEPS)) for t in data["train"][:1]]
    jobs = [(run.context(c.program), tasks) for c in checked]  # type: ignore[attr-defined]
    return play(run, jobs, seed=cfg.episode_seed, purpose="smoke", store=run.store)
