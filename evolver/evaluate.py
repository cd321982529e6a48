"""Evaluations: what plays (the evaluation cache first, then this process or the run's cluster), the
store and the hooks each finished episode reaches, and split summaries.

The episodes themselves play in :mod:`evolver.lockstep`: all live episodes advance together, so each
model call is one batch.

Error policy (as in GEPA): one episode's failure (harness crash, env error, garbage output) is a
score of 0 with its error and the trace so far; only systemic failures (the backend cannot run at
all, the benchmark engine died) raise.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable

from evolver.harness import ProgramContext
from evolver.harness_sandbox import sandboxed_harnesses
from evolver.judge import Judging
from evolver.lockstep import Live, play_lockstep, try_harness
from evolver.remote import Unit, describe, pack_program
from evolver.types import Episode, Evaluation, Task


@dataclasses.dataclass
class Job:
    """Tasks one program plays in :func:`evaluate_many`. Unset fields take evaluate_many's arguments:
    ``seed`` (a job's own keeps repeated rollouts of one task apart: cache keys and stored rows
    include it), ``backend`` (a job of its own plays e.g. sampled beside greedy ones, in the same
    lockstep when both reach the same engine: :meth:`Backend.lowered`) and ``purpose``.
    ``temperature`` is read by :func:`evolver.playing.play`, which makes the backend from it.

    ``replay`` (one entry per task, None or a list of an earlier episode's steps) continues an episode
    from an intermediate state: its first model calls are answered with those steps' replies instead of
    asking the backend, so the environment and the harness pass through the same states, and the model
    is asked from the step after them (Tree-GRPO's branches). Every replayed prompt must equal the
    recorded one, so what the model is asked next is exactly what it would have seen; where it does
    not (an environment that does not replay its actions the same way) the episode fails with
    :data:`REPLAY_DIVERGED` in its error. A job that replays plays in this process, not on a cluster."""

    ctx: ProgramContext
    tasks: list[Task]
    seed: int | None = None
    backend: Any = None
    purpose: str | None = None
    temperature: float | None = None
    replay: list | None = None

    @classmethod
    def of(cls, job) -> "Job":
        """A :class:`Job` from itself or a ``(ctx, tasks)`` / ``(ctx, tasks, seed)`` tuple."""
        return job if isinstance(job, Job) else cls(*job)


def run_episodes(ctx: ProgramContext, benchmark, backend, tasks: list[Task], **kw: Any) -> list[Episode]:
    """Play ``tasks`` with the program in ``ctx`` and return their episodes in task order."""
    return evaluate_many([(ctx, tasks)], benchmark, backend, **kw)[0]


def evaluate_many(jobs: list, benchmark, backend, *, seed: int = 0,
                  purpose: str = "eval", store=None, run=None, max_live: int = 32, use_cache: bool = True,
                  progress: Callable[[int, int], None] | None = None,
                  on_episode: Callable[[Episode], None] | None = None,
                  harness_factory: Callable[[ProgramContext], Any] | None = None,
                  step_monitor=None, judging=None) -> list[list[Episode]]:
    """Play several programs' tasks at once, in one lockstep, so candidates share every batch.

    A job is a :class:`Job` or a ``(ctx, tasks)`` / ``(ctx, tasks, seed)`` tuple.
    ``harness_factory(ctx)`` builds a job's harness. By default, with a ``run`` whose config has
    ``loop.sandbox_harness`` (the default), each job's harness runs in its own sandboxed process
    (:class:`evolver.harness_sandbox.SandboxedHarness`), closed when the call returns: every stage that
    plays a candidate (rollouts, smoke, dev, test, trainers, verifiers) keeps its code out of this
    process. Without a run, the harness is imported here (trusted code: tests, the seed). It is called
    only for jobs with episodes left to play.

    ``step_monitor`` (:class:`evolver.monitor.StepMonitor`; default: the run's ``loop.monitor``) checks
    every action and tool call before it runs; a confirmed hack is blocked and answered with
    :data:`evolver.monitor.BLOCKED`, its verdict kept on the step, and the episode goes on.

    Returns one list of episodes per job, in task order. Cached episodes (same program content,
    task, model and seed) are returned from the store instead of being played again.

    Judge-scored tasks (``Benchmark.rubric``): their episodes, cached ones included, are ranked together
    per task once all have played, by the run's ``judge`` role, then stored and announced (``on_episode``,
    ``on_episode_end``) with the judge's rewards as their scores (:mod:`evolver.judge`); without a run
    the environment's score stands. ``judging`` (an :class:`evolver.judge.Judging`) is one shared by the
    caller's calls, which finishes it: until then, these episodes keep their environment's scores.
    """
    sandboxed = harness_factory is None and _sandboxes(run)
    cluster = getattr(run, "cluster", None) if harness_factory is None else None  # workers sandbox their own
    if step_monitor is None:
        from evolver.monitor import step_monitor as run_monitor
        step_monitor = run_monitor(run)
    jobs = [Job.of(job) for job in jobs]
    backends = [job.backend or backend for job in jobs]
    max_steps = getattr(benchmark, "max_steps", 1) or 1
    run_id = getattr(run, "id", "") or ""
    slots: list[tuple[int, int, Episode]] = []  # (job, index, template)
    for j, job in enumerate(jobs):
        p = job.ctx.program
        slots += [(j, i, Episode(task=t, program_id=p.id, program_hash=p.hash, model=backends[j].model,
                                 seed=seed if job.seed is None else job.seed, run_id=run_id,
                                 purpose=job.purpose or purpose, max_steps=t.max_steps or max_steps))
                  for i, t in enumerate(job.tasks)]
    results: dict[tuple[int, int], Episode] = {}
    if store is not None and use_cache:
        found = store.cached([e.cache_key for _, _, e in slots])
        store.add_uses(run_id, list(found.values()))  # so this run finds them among its own episodes
        for j, i, e in slots:
            if e.cache_key in found:
                # Same content under another name: count it for this program too.
                results[(j, i)] = dataclasses.replace(found[e.cache_key], program_id=e.program_id, max_steps=e.max_steps)
    total = len(slots)
    if progress:
        progress(len(results), total)
    owned = judging is None
    judging = Judging.of(benchmark, [e.task for _, _, e in slots], run, store=store) if owned else judging

    def release(episodes: list[Episode]) -> None:
        if store is not None:
            store.add_episodes([e for e in episodes if not e.cached])
        for e in episodes:
            _emit(run, e, on_episode)
    release(judging.hold(list(results.values()), release) if judging else list(results.values()))
    pending = [(j, i, e) for j, i, e in slots if (j, i) not in results]

    def finished(done: list[Live]) -> None:
        for lv in done:
            results[lv.key] = lv.episode
        episodes = [lv.episode for lv in done]
        # Judge-scored episodes wait for the rest of their task's group.
        release(judging.hold(episodes, release) if judging else episodes)
        if progress:
            progress(len(results), total)
    cluster = getattr(run, "cluster", None) if harness_factory is None else None
    replays = any(job.replay for job in jobs)
    try:
        if not (pending and cluster is not None and not replays
                and _play_on(cluster, run, jobs, backends, pending, finished, max_live)):
            _play_here(jobs, backends, benchmark, pending, finished, max_live, sandboxed, harness_factory,
                       step_monitor, run)
    except BaseException:
        if judging:  # stopped before their groups were complete: kept unjudged (a resume judges them again)
            judging.abandon()
        raise
    if judging and owned:
        judging.finish()
    return [[results[(j, i)] for i in range(len(job.tasks))] for j, job in enumerate(jobs)]


def _play_here(jobs: list[Job], backends: list, benchmark, pending: list, finished: Callable, max_live: int,
               sandboxed: bool, harness_factory, step_monitor, run) -> None:
    """Play ``pending`` in this process, each job's harness sandboxed when ``sandboxed``."""
    playing = {j for j, _, _ in pending}
    with contextlib.ExitStack() as stack:
        if sandboxed and playing:
            harness_factory = stack.enter_context(sandboxed_harnesses(run))
        harnesses = [try_harness(job.ctx, harness_factory) if j in playing else None for j, job in enumerate(jobs)]
        lives = (Live(e, jobs[j].ctx, harnesses[j], e.max_steps, key=(j, i), backend=backends[j],
                       monitor=step_monitor, replay=jobs[j].replay[i] if jobs[j].replay else None)
                 for j, i, e in pending)
        max_live = min(max_live, getattr(benchmark, "max_live", None) or max_live)
        play_lockstep(lives, benchmark, max_live, finished)


def _play_on(cluster, run, jobs: list[Job], backends: list, pending: list, finished: Callable,
             max_live: int) -> bool:
    """Play ``pending`` on the run's cluster workers (:mod:`evolver.remote`); False, having played
    nothing, when a job's backend can only play in this process (the caller then plays them here)."""
    specs = [describe(b) for b in backends]
    if any(specs[j] is None for j, _, _ in pending):
        return False
    programs, units = {}, []
    for j, i, e in pending:
        ctx = jobs[j].ctx
        programs.setdefault(ctx.program.hash, ctx.program)
        tokenizer = getattr(ctx.count_tokens, "__self__", None) is not None  # the model's, not characters / 4
        units.append(Unit((j, i), e, ctx.program.hash, specs[j], tokenizer))
    packed = {h: pack_program(p) for h, p in programs.items()}
    seen: set = set()
    tokens = run.tokens if isinstance(getattr(run, "tokens", None), dict) else {}
    for batch in cluster.play(units, packed, run.config, max_live=max_live):
        done = [Live(e, jobs[key[0]].ctx, None, e.max_steps, key=key) for key, e in batch if key not in seen]
        seen.update(lv.key for lv in done)
        tokens["executor"] = tokens.get("executor", 0) + sum(lv.episode.prompt_tokens + lv.episode.completion_tokens
                                                             for lv in done)
        if done:
            finished(done)  # one store write for the episodes that arrived together
    return True


def _sandboxes(run) -> bool:
    """Whether ``run`` plays harnesses sandboxed (``loop.sandbox_harness``)."""
    loop = getattr(getattr(run, "config", None), "loop", None)
    return bool(getattr(loop, "sandbox_harness", False))


def _emit(run, episode: Episode, on_episode) -> None:
    if on_episode:
        on_episode(episode)
    from evolver import plugins
    plugins.hook().on_episode_end(run=run, episode=episode)


def summarize(program_id: str, split: str, episodes: list[Episode]) -> Evaluation:
    """The :class:`Evaluation` of a program's episodes on one split: mean score and success, per category, tokens."""
    n = len(episodes)
    if n == 0:
        return Evaluation(program_id, split, 0.0, 0.0, 0, 0.0, 0.0)
    cats: dict[str, list[float]] = {}
    for e in episodes:
        cats.setdefault(e.task.category, []).append(e.score)
    return Evaluation(
        program_id=program_id, split=split,
        score=sum(e.score for e in episodes) / n,
        success=sum(e.won for e in episodes) / n,
        n=n,
        context_tokens=sum(e.prompt_tokens for e in episodes) / n,
        cost=sum(e.prompt_tokens + e.completion_tokens for e in episodes) / n,
        per_category={c: sum(v) / len(v) for c, v in sorted(cats.items())},
        errors=sum(1 for e in episodes if e.error),
    )


def sample_stratified(tasks: list[Task], per_category: int, seed: int) -> list[Task]:
    """A training batch: ``per_category`` tasks from each category, chosen by a seeded shuffle."""
    import random

    by_cat: dict[str, list[Task]] = {}
    for t in tasks:
        by_cat.setdefault(t.category, []).append(t)
    rng = random.Random(seed)
    batch = []
    for cat in sorted(by_cat):
        pool = list(by_cat[cat])
        rng.shuffle(pool)
        batch += pool[:per_category]
    return batch

