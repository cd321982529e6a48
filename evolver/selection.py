"""Recording a candidate's state changes, and how candidates are judged on dev: staged evaluation with
early stopping both ways (a candidate that cannot be admitted, or is already certain to be, stops
before the whole split), the whole split for the rest, and the frontier's decision with its evidence;
members admitted early play the rest of dev before anything is judged against them.
The loop (evolver/loop.py) calls :func:`evaluate_and_select` once per iteration.
"""
from __future__ import annotations

import math

from evolver import plugins
from evolver.evaluate import summarize
from evolver.frontier import Objective
from evolver.gate import compare, interim_level
from evolver.playing import baseline_jobs, episodes_per_task, evaluate_programs, per_task, play, progress_status, tries
from evolver.run import Run
from evolver.types import Candidate


# outcome -> (the proposal's new status, its frontier event); None: that record is left as it is.
_RECORDED_AS = {"proposed": ("proposed", None), "rejected": ("rejected", "reject"), "evaluated": (None, None),
                "discarded": ("discarded", "reject"), "admitted": ("admitted", "admit")}


def transition(run: Run, it: int, cand: Candidate, outcome: str, reason: str = "", evidence: dict | None = None,
               detail: dict | None = None, note: str = "", evicted: dict | None = None) -> None:
    """A candidate changes state (``outcome``, an ``on_candidate`` outcome), recorded everywhere it shows,
    in this order: its proposal row (``evidence`` replaces its scores, ``detail`` its detail), its frontier
    event (``evidence`` as the metrics) and an "evict" event per member it displaced (``evicted``: id ->
    that member's metrics), the run.log line ``"<id> <note>"`` (none without a note), then the hook, so a
    plugin sees the change already stored."""
    status, event = _RECORDED_AS[outcome]
    if status:
        run.store.update_proposal(cand.id, status, reason, evidence, detail=detail)
    if event:
        run.store.add_frontier_event(run.id, it, cand.id, event, evidence or {}, reason)
    for gone, metrics in (evicted or {}).items():
        run.store.add_frontier_event(run.id, it, gone, "evict", metrics, f"displaced by {cand.id}")
    if note:
        run.log(f"{cand.id} {note}" + (f"; displaces {', '.join(evicted)}" if evicted else ""))
    plugins.hook().on_candidate(run=run, candidate=cand, outcome=outcome)


def probe_tasks(dev: list, share: float = 0.0) -> list:
    """A stage of the evaluation: the first dev task of each category (``share`` 0), or the first
    ``ceil(share * n)`` of each category's ``n`` tasks, in dev order."""
    by_cat: dict[str, list] = {}
    for t in dev:
        by_cat.setdefault(t.category, []).append(t)
    keep = {id(t) for ts in by_cat.values() for t in ts[:max(1, math.ceil(share * len(ts)))]}
    return [t for t in dev if id(t) in keep]


STAGES = (0.0, 0.5)  # the probe (one task a category), then half of each category, before the whole split


def _probe(run: Run, it: int, candidates: list[Candidate], data: dict) -> tuple[list[Candidate], list[str]]:
    """Staged evaluation with early stopping: every candidate plays the probe (one dev task per
    category), then half of each category, all candidates in one batch each time, with their parents
    beside them (from the cache where they played before); the episodes played are reused by the next
    stage and the full dev split. After each stage a candidate stops when it cannot be admitted on what
    it has shown: its paired score against its parent on the tasks so far is worse (the gate's test,
    bootstrap when the gate is off, at ``loop.gate_level``) and it is leaner on no other objective, so
    not even a trade-off. With ``loop.admit_early``, after a stage past the probe a candidate also stops
    when it is already certain to be admitted (:func:`_certain`), and is admitted on what it played.
    Either way its proposal records the dev episodes it did not play (``saved_episodes``). Returns the
    candidates that go on to the whole split and the ids admitted early."""
    cfg, dev = run.config.loop, data["dev"]
    done, admitted = 0, []
    for share in STAGES:
        stage = probe_tasks(dev, share)
        if len(stage) >= len(dev) or not candidates:
            break
        if len(stage) <= done:  # no bigger than the stage before: nothing new to judge by
            continue
        done = len(stage)
        run.status = f"iteration {it}: {len(candidates)} candidates on {len(stage)} of {len(dev)} dev tasks"
        parents = {c.proposal.parent_id for c in candidates}
        programs = [c.program for c in candidates] + [run.repo.checkout(p) for p in sorted(parents)]  # type: ignore
        results = play(run, [(run.context(p), stage) for p in programs], seed=cfg.episode_seed, purpose="eval",
                       store=run.store, progress=progress_status(run, "probe" if share == 0 else "stage"))
        played = {p.id: eps for p, eps in zip(programs, results)}
        saved = len(dev) * episodes_per_task(run) - len(stage)
        where = "the probe" if share == 0 else f"{len(stage)} of {len(dev)} dev tasks"
        kept = []
        for cand in candidates:
            hopeless = _hopeless(cfg, played[cand.id], played[cand.proposal.parent_id])
            certain = _certain(run, played[cand.id], len(stage) / len(dev)) if share > 0 and not hopeless else None
            if certain:
                ev = summarize(cand.id, "dev", played[cand.id])
                run.store.add_evaluation(run.id, it, ev)
                early = {"dev_tasks": len(stage), "saved_episodes": saved, "certain": certain}
                if _decide(run, it, cand, ev, per_task(played[cand.id]), early, where):
                    admitted.append(cand.id)
                continue
            if hopeless is None:
                kept.append(cand)
                continue
            paired, a, b = hopeless
            reason = (f"stopped after {where}: {a['score']:.3f} vs its parent's {b['score']:.3f}, paired "
                      f"{paired}; leaner on nothing: it cannot be admitted ({saved} dev episodes saved)")
            evidence = {"probe_score": a["score"], "paired": paired.to_dict() | {"versus": cand.proposal.parent_id},
                        "probe_tasks": len(stage), "saved_episodes": saved}
            transition(run, it, cand, "discarded", reason, evidence, note=reason)
            run.repo.remove_worktree(cand.id)
        candidates = kept
    return candidates, admitted


def _certain(run: Run, mine: list, fraction: float) -> dict | None:
    """``{"level", "weakest"}`` when episodes ``mine``, a share ``fraction`` of the dev split, are already
    certain to be admitted: the paired score is better than every frontier member's on their common
    tasks at :func:`evolver.gate.interim_level` (stricter than ``loop.gate_level``, so the two looks
    together admit a candidate no better than a member about as rarely as the gate alone), so no member
    can dominate or tie it and it beats the weakest at capacity; ``weakest`` is the comparison with the
    lowest interval, with its member as ``versus``. Else None."""
    cfg = run.config.loop
    if not cfg.admit_early or not run.frontier.members:
        return None
    level = interim_level(cfg.gate_level, fraction)
    scores = per_task(mine)["score"]
    paired = {m.program_id: compare(scores, m.per_task.get("score") or {}, _method(cfg), level)
              for m in run.frontier.members}
    if any(c is None or c.verdict != "better" for c in paired.values()):
        return None
    versus = min(paired, key=lambda pid: paired[pid].low)
    return {"level": level, "weakest": paired[versus].to_dict() | {"versus": versus}}


def _method(cfg) -> str:
    """The paired test that stops a candidate early: the gate's, bootstrap when the gate is off."""
    return cfg.gate if cfg.gate != "none" else "bootstrap"


def _hopeless(cfg, mine: list, theirs: list):
    """(paired score, candidate's metrics, parent's metrics) when episodes ``mine`` cannot be admitted
    against the parent's ``theirs`` on the same tasks: the paired score is worse (``cfg.gate``'s test,
    bootstrap when off, at ``cfg.gate_level``) and no other objective is better; else None."""
    paired = compare(per_task(mine)["score"], per_task(theirs)["score"], _method(cfg), cfg.gate_level)
    a, b = summarize("candidate", "dev", mine).metrics(), summarize("parent", "dev", theirs).metrics()
    if paired is None or paired.verdict != "worse" or any(_better(o, a, b) for o in cfg.objectives[1:]):
        return None
    return paired, a, b


def _better(objective: str, a: dict, b: dict) -> bool:
    """Whether metrics ``a`` beat ``b`` on ``objective`` ("metric:goal"), plainly (not equal within isclose)."""
    o = Objective.parse(objective)
    if o.metric not in a or o.metric not in b or math.isclose(a[o.metric], b[o.metric]):
        return False
    return o.better(a[o.metric], b[o.metric])


def complete_members(run: Run, it: int, dev: list) -> list[str]:
    """Members admitted early hold values for only the dev tasks they played: a mean flattered by the stop
    (it stopped because that half went well), and paired tests against them on half the split. Before
    anything is judged against them (the next candidates; the choice of the best among several members),
    each plays the rest of ``dev`` (what it played comes from the cache) and takes the whole split's
    metrics and values. Returns the ids completed."""
    want = {t.id for t in dev}
    short = [m for m in run.frontier.members if not want <= set(m.per_task.get("score") or {})]
    if not short:
        return []
    run.status = f"iteration {it}: the rest of dev for {', '.join(m.program_id for m in short)}"
    programs = [run.repo.checkout(m.program_id) for m in short]
    evals, values, _ = evaluate_programs(run, programs, dev, "dev", it)
    for m, ev, per in zip(short, evals, values):
        had = len(m.per_task.get("score") or {})
        run.log(f"{m.program_id}, admitted early on {had} dev tasks, played the other {len(want) - had}: dev "
                f"{m.metrics['score']:.3f} -> {ev.score:.3f} on all {len(want)}")
        m.metrics, m.per_task = ev.metrics(), per
    retag(run)
    return [m.program_id for m in short]


def evaluate_and_select(run: Run, it: int, candidates: list[Candidate], data: dict) -> list[str]:
    """Iteration ``it``'s checked candidates on dev (staged when ``loop.staged``), each offered to the
    frontier; the tags follow. Returns the ids admitted."""
    if not candidates:
        return []
    complete_members(run, it, data["dev"])
    admitted: list[str] = []
    if run.config.loop.staged:
        candidates, admitted = _probe(run, it, candidates, data)
    if candidates:
        run.status = f"iteration {it}: evaluating {len(candidates)} candidates on dev"
        programs = [c.program for c in candidates]  # type: ignore[attr-defined]
        # Best-of-N's dev episodes for the tries so far, these included, play in this lockstep (the seed's
        # weights batch with every untrained candidate's); the end of the run finds them in the cache.
        n = tries(run) + len(candidates)
        extra = baseline_jobs(run, data["dev"], n) if run.config.loop.best_of_n and n >= 2 else []
        evals, values, _ = evaluate_programs(run, programs, data["dev"], "dev", it, extra=extra)
        admitted += [c.id for c, ev, per in zip(candidates, evals, values) if _decide(run, it, c, ev, per)]
    retag(run)
    return admitted


def _decide(run: Run, it: int, cand: Candidate, ev, per: dict, early: dict | None = None, where: str = "") -> bool:
    """Offer a candidate evaluated on dev (``ev``, its per-task values ``per``) to the frontier, and record
    the decision with its evidence; ``early``: what an early admission after ``where`` adds to it."""
    metrics = ev.metrics()
    cand.scores = metrics
    transition(run, it, cand, "evaluated")
    before = {m.program_id: m.metrics for m in run.frontier.members}
    decision = run.frontier.consider(cand.id, metrics, it, per_task=per)
    commit = run.repo.record_scores(cand.id, {f"dev_{k}": v for k, v in metrics.items()})
    run.store.update_program_commit(cand.id, commit, run.repo.manifest(cand.id))
    # The evidence goes with the decision: the paired result against the member it was judged by.
    evidence = metrics | ({"paired": decision.paired.to_dict() | {"versus": decision.versus}}
                          if decision.paired else {}) | (early or {})
    line = f"dev {ev.score:.3f}" + (f" vs {decision.versus} {before[decision.versus]['score']:.3f}, paired "
                                    f"{decision.paired}" if decision.paired else "")
    if early:
        c = early["certain"]
        line += (f"; stopped after {where}, certain to be admitted (paired vs {c['weakest']['versus']} at "
                 f"{c['level']:.2%} is better; {early['saved_episodes']} dev episodes saved)")
    if decision.admitted:
        cand.status = "admitted"
        transition(run, it, cand, "admitted", decision.reason, evidence, note=f"admitted: {line}",
                   evicted={gone: before.get(gone, {}) for gone in decision.evicted})
        plugins.hook().on_frontier_changed(run=run, frontier=run.frontier)
    else:
        cand.status = "discarded"
        transition(run, it, cand, "discarded", decision.reason, evidence,
                   note=f"discarded: {line} ({decision.rule})")
    run.repo.remove_worktree(cand.id)
    return decision.admitted


def retag(run: Run) -> None:
    """Move the repository's ``frontier/<id>`` tags and ``best`` to the frontier as it now stands."""
    members = set(run.frontier.ids())
    for tag in run.repo.tags("frontier/"):
        if tag.split("/", 1)[1] not in members:
            run.repo.untag(tag)
    for pid in members:
        run.repo.tag(f"frontier/{pid}", f"program/{pid}")
    run.repo.tag("best", f"program/{run.frontier.best().program_id}")
