"""Batched episodes, the evaluation cache, and split summaries.

One episode's path: benchmark Task -> harness builds the context -> the backend answers, batched
across every live episode -> harness parses an action (or a tool call) -> environment steps -> ...
-> score -> the store. All live episodes advance in lockstep so each model call is one batch.

Error policy (as in GEPA): one episode's failure (harness crash, env error, garbage output) is a
score of 0 with its error and the trace so far; only systemic failures (the backend cannot run at
all, the benchmark engine died) raise.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import signal
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterator

from evolver.errors import BackendError, BenchmarkError
from evolver.harness import Action, ProgramContext, make_harness, task_for_harness
from evolver.judge import Judging
from evolver.types import (ChoiceRequest, ChoiceResult, Episode, Evaluation, GenRequest, GenResult, Observation, Step, Task,
                           stable_hash)


@dataclasses.dataclass
class Job:
    """Tasks one program plays in :func:`evaluate_many`. Unset fields take evaluate_many's arguments:
    ``seed`` (a job's own keeps repeated rollouts of one task apart: cache keys and stored rows
    include it), ``backend`` (a job of its own plays e.g. sampled beside greedy ones, in the same
    lockstep when both reach the same engine: :meth:`Backend.lowered`) and ``purpose``.
    ``temperature`` is read by :func:`evolver.loop.play`, which makes the backend from it.

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


REPLAY_DIVERGED = "replay diverged"


class _Live:
    """One episode in flight."""

    def __init__(self, episode: Episode, ctx: ProgramContext, harness, max_steps: int, key=None, backend=None,
                 monitor=None, replay=None):
        self.episode, self.ctx, self.harness, self.max_steps, self.key = episode, ctx, harness, max_steps, key
        self.backend, self.monitor = backend, monitor
        self.replay = list(replay or [])  # recorded steps that answer its first model calls
        self.env, self.state, self.obs = None, None, Observation("", done=True)
        self.started = time.perf_counter()
        self.request = None
        self.done = False


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

    def finished(done: list[_Live]) -> None:
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
            harness_factory = stack.enter_context(_sandboxed_harnesses(run))
        harnesses = [_try_harness(job.ctx, harness_factory) if j in playing else None for j, job in enumerate(jobs)]
        lives = (_Live(e, jobs[j].ctx, harnesses[j], e.max_steps, key=(j, i), backend=backends[j],
                       monitor=step_monitor, replay=jobs[j].replay[i] if jobs[j].replay else None)
                 for j, i, e in pending)
        max_live = min(max_live, getattr(benchmark, "max_live", None) or max_live)
        _play(lives, benchmark, max_live, finished)


def _play_on(cluster, run, jobs: list[Job], backends: list, pending: list, finished: Callable,
             max_live: int) -> bool:
    """Play ``pending`` on the run's cluster workers (:mod:`evolver.remote`); False, having played
    nothing, when a job's backend can only play in this process (the caller then plays them here)."""
    from evolver.remote import Unit, describe, pack_program

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
        done = [_Live(e, jobs[key[0]].ctx, None, e.max_steps, key=key) for key, e in batch if key not in seen]
        seen.update(lv.key for lv in done)
        tokens["executor"] = tokens.get("executor", 0) + sum(lv.episode.prompt_tokens + lv.episode.completion_tokens
                                                             for lv in done)
        if done:
            finished(done)  # one store write for the episodes that arrived together
    return True


def _sandboxes(run) -> bool:
    loop = getattr(getattr(run, "config", None), "loop", None)
    return bool(getattr(loop, "sandbox_harness", False))


@contextlib.contextmanager
def _sandboxed_harnesses(run, benchmark=None):
    """A harness factory that starts one sandboxed harness process per job, all closed on exit; each may
    import what the benchmark (default ``run.benchmark``) declares in ``harness_packages``."""
    from evolver.harness_sandbox import SandboxedHarness
    opened: list = []
    declared = getattr(benchmark or getattr(run, "benchmark", None), "harness_packages", None) or {}

    def factory(ctx: ProgramContext):
        opened.append(SandboxedHarness(ctx, memory_mb=run.config.loop.harness_memory_mb, packages=list(declared)))
        return opened[-1]
    try:
        yield factory
    finally:
        for harness in opened:
            harness.close()


HARNESS_CALL_S = 10.0  # one harness call (not the model's): far above what any sane harness needs


class HarnessTimeout(Exception):
    pass


@contextlib.contextmanager
def harness_deadline(seconds: float | None = None):
    """Interrupt a harness call that runs too long (an evolved harness with an endless loop), so it
    fails its episode instead of hanging the run. SIGALRM reaches Python code between bytecodes in
    the main thread; elsewhere (or on a platform without it) the call runs unguarded."""
    seconds = seconds or HARNESS_CALL_S
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise HarnessTimeout(f"a harness call ran longer than {seconds:.0f}s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _try_harness(ctx: ProgramContext, factory: Callable | None = None):
    """A harness that fails to build fails its program's episodes, not the whole evaluation."""
    try:
        return (factory or make_harness)(ctx)
    except Exception as exc:
        return exc


def _emit(run, episode: Episode, on_episode) -> None:
    if on_episode:
        on_episode(episode)
    from evolver import plugins
    plugins.hook().on_episode_end(run=run, episode=episode)


def _play(lives: Iterator[_Live], benchmark, max_live: int, finished: Callable[[list[_Live]], None]) -> None:
    """Advance up to ``max_live`` episodes in lockstep, one batched model call per round; a slot freed
    by a finished episode is refilled by the next one at once (not when a whole wave is done), so the
    batch stays full while episodes of different lengths finish at different rounds."""
    for done in _play_iter(lives, benchmark, max_live):
        finished(done)  # stored as they finish: a run killed now loses only the live ones


def _play_iter(lives: Iterator[_Live], benchmark, max_live: int) -> Iterator[list[_Live]]:
    """:func:`_play` as a generator of the episodes that finish together (a cluster worker streams them)."""
    live: list[_Live] = []
    try:
        while True:
            for lv in itertools.islice(lives, max_live - len(live)):
                _start(lv, benchmark)
                live.append(lv)
            done = [lv for lv in live if lv.done]
            if done:
                live = [lv for lv in live if not lv.done]
                for lv in done:
                    _close(lv)
                yield done
                continue  # refill the freed slots before the next model call
            if not live:
                return
            for group, answers, seconds in _answer_round(live):
                share = seconds / len(group)
                for lv, answer in zip(group, answers):
                    lv.episode.model_s += share
                    _act(lv, answer, share)
                    if not lv.done:
                        _ask(lv)  # the next request, or the end of the episode
    finally:
        for lv in live:
            _close(lv)


def _answer_round(live: list[_Live]) -> list[tuple[list[_Live], list, float]]:
    """Every live episode's pending request answered: ``(episodes, answers, seconds)`` per call made.

    Requests are grouped by backend and kind (generation, choice). Each group is lowered to plain
    generations (:meth:`Backend.lowered`) where its backend can, and the lowered groups that reach the
    same engine are answered by ONE ``generate`` call: a sampled and a greedy player of the same
    weights share every batch. A group that cannot be lowered is answered by its backend directly."""
    groups: dict[tuple[int, bool], list[_Live]] = {}
    out, engines = [], {}
    for lv in live:
        if len(lv.episode.steps) < len(lv.replay):
            answer = _replayed(lv)
            if answer is None:  # diverged: the episode ends here, failed
                _finish(lv)
            else:
                out.append(([lv], [answer], 0.0))
            continue
        if isinstance(lv.request, ChoiceRequest) and len(lv.request.options) == 1:
            # A choice of one is no choice: a harness that has settled the move (an observer's note it
            # follows) still sends the context it would have shown, for the trace and for training.
            out.append(([lv], [ChoiceResult(index=0, scores=[0.0])], 0.0))
            continue
        groups.setdefault((id(lv.backend), isinstance(lv.request, GenRequest)), []).append(lv)
    for (_, is_gen), group in groups.items():
        backend = group[0].backend
        seeded = getattr(backend, "seeded_by_episode", False)
        requests = [_with_seed(lv) if seeded else lv.request for lv in group]
        low = backend.lowered(requests)
        if low is None:
            t0 = time.perf_counter()
            answers = (backend.generate if is_gen else backend.choose)(requests)
            out.append((group, _checked(backend, answers, group), time.perf_counter() - t0))
        else:
            engines.setdefault(id(low.engine), []).append((group, low))
    for parts in engines.values():
        engine = parts[0][1].engine
        gens = [g for _, low in parts for g in low.gens]
        t0 = time.perf_counter()
        results = _checked(engine, engine.generate(gens), gens)
        seconds = (time.perf_counter() - t0) / len(results)
        at = 0
        for group, low in parts:
            mine = results[at:at + len(low.gens)]
            at += len(low.gens)
            out.append((group, _checked(engine, low.finish(mine), group), seconds * len(mine)))
    return out


def _replayed(lv: _Live):
    """The recorded reply to the episode's next call; None, with the episode failed, when the prompt
    differs from the recorded one (the continuation would not start from the state the model was in)."""
    step, request = lv.replay[len(lv.episode.steps)], lv.request
    prompt = json.dumps([asdict(m) for m in request.messages], ensure_ascii=False)
    if prompt != step.prompt:
        _fail(lv.episode, f"{REPLAY_DIVERGED} at step {step.index}: the prompt differs from the recorded one "
                          "(does the environment replay actions deterministically?)", "")
        return None
    sample = step.sample or {}
    gen = GenResult(text=sample.get("text", step.output), prompt_tokens=step.prompt_tokens,
                    completion_tokens=step.completion_tokens, prompt_ids=sample.get("prompt_ids"),
                    completion_ids=sample.get("completion_ids"), logprobs=sample.get("logprobs"))
    if isinstance(request, ChoiceRequest):
        index = request.options.index(step.action) if step.action in request.options else 0
        return ChoiceResult(index=index, scores=[0.0] * len(request.options), prompt_tokens=gen.prompt_tokens,
                            completion_tokens=gen.completion_tokens, sample=gen)
    return gen


def _checked(backend, answers: list, asked: list) -> list:
    if len(answers) != len(asked):
        raise BackendError(f"backend {backend.name} answered {len(answers)} of {len(asked)} requests")
    return answers


def _with_seed(lv: _Live):
    """The request with a seed of its episode's own (episode seed, task, step) unless the harness set
    one: a sampling backend (``seeded_by_episode``) then draws the same reply on a rerun, whatever
    else shares the batch and whichever episodes the cache spared."""
    if lv.request.seed is not None:
        return lv.request
    ep = lv.episode
    return dataclasses.replace(lv.request, seed=int(stable_hash(ep.seed, ep.task.id, len(ep.steps)), 16) % 2 ** 31)


def _start(lv: _Live, benchmark) -> None:
    """Reset the episode's environment and ask for its first action."""
    if isinstance(lv.harness, Exception):
        _fail(lv.episode, f"harness failed to load: {lv.harness!r}", "")
        return _finish(lv)
    try:
        lv.env = benchmark.env(lv.episode.task)
        lv.obs = lv.env.reset()
        with harness_deadline():
            lv.state = lv.harness.start(task_for_harness(lv.episode.task, getattr(benchmark, "harness_hints", None),
                                                         getattr(benchmark, "public_seed", False)), lv.obs)
    except BenchmarkError:
        raise
    except Exception as exc:
        _fail(lv.episode, f"episode start failed: {exc!r}", traceback.format_exc())
        return _finish(lv)
    _ask(lv)


def _close(lv: _Live) -> None:
    if lv.env is not None:
        try:
            lv.env.close()
        except Exception:
            pass
        lv.env = None
    lv.episode.wall_s = time.perf_counter() - lv.started
    lv.episode.tally()


def _ask(lv: _Live) -> None:
    if lv.obs.done or len([s for s in lv.episode.steps if not s.tool_calls]) >= lv.max_steps:
        return _finish(lv)
    try:
        with harness_deadline():
            lv.request = lv.harness.next_call(lv.state, lv.obs)
    except Exception as exc:
        _fail(lv.episode, f"harness.next_call raised {exc!r}", traceback.format_exc())
        return _finish(lv)
    if lv.request is None:
        _finish(lv)


def _act(lv: _Live, answer, latency: float) -> None:
    ep, request = lv.episode, lv.request
    prompt = json.dumps([asdict(m) for m in request.messages], ensure_ascii=False)
    step = Step(index=len(ep.steps), prompt=prompt, output="", action="", observation="",
                prompt_tokens=answer.prompt_tokens, completion_tokens=answer.completion_tokens,
                latency_s=latency, error=answer.error)
    gen = answer if isinstance(answer, GenResult) else getattr(answer, "sample", None)
    if gen is not None and gen.completion_ids is not None:
        # "replayed": the reply was an earlier episode's (Job.replay), not the model's now
        step.sample = {"prompt_ids": gen.prompt_ids, "completion_ids": gen.completion_ids,
                       "logprobs": gen.logprobs, "state": lv.obs.text, "text": gen.text,
                       "replayed": len(ep.steps) < len(lv.replay)}
    ep.steps.append(step)
    try:
        with harness_deadline():
            action: Action = lv.harness.parse(lv.state, lv.obs, request, answer)
    except Exception as exc:
        step.error = f"harness.parse raised {exc!r}"
        action = Action(env_action="", output=getattr(answer, "text", ""))
    step.output = action.output or getattr(answer, "text", "")
    if isinstance(request, ChoiceRequest):
        step.output = step.output or "(no choice)"
    verdict = lv.monitor.check(action.env_action or "", action.tool, action.args) if lv.monitor else None
    step.monitor = verdict
    try:
        if verdict and verdict["blocked"]:  # not run: dummy output, and the episode goes on
            from evolver.monitor import BLOCKED
            step.observation = BLOCKED
            if action.tool:
                step.tool_calls = [{"tool": action.tool, "args": action.args, "result": BLOCKED}]
            else:
                step.action, step.reward = action.env_action or "", lv.obs.score
        elif action.tool:
            text = run_tool(lv.ctx, action)
            step.tool_calls = [{"tool": action.tool, "args": action.args, "result": text[:2000]}]
            step.observation = text
        else:
            step.action = action.env_action or ""
            lv.obs = lv.env.step(step.action)
            step.observation = lv.obs.text
            step.reward = lv.obs.score
            ep.prediction = step.action
        with harness_deadline():
            lv.harness.observe(lv.state, action, step.observation)
    except BenchmarkError:
        raise
    except Exception as exc:
        _fail(ep, f"step failed: {exc!r}", traceback.format_exc())
        _finish(lv)


def _finish(lv: _Live) -> None:
    lv.done = True
    ep, obs = lv.episode, lv.obs
    if ep.error is None:
        ep.score = max(0.0, min(1.0, float(obs.score)))
        ep.won = bool(obs.info.get("won", ep.score >= 1.0))
        ep.rewards = {"score": ep.score, **{k: float(v) for k, v in obs.info.get("rewards", {}).items()}}


def _fail(ep: Episode, message: str, tb: str) -> None:
    ep.error = f"{message}\n{tb[-1500:]}"
    ep.score, ep.won = 0.0, False


def run_tool(ctx: ProgramContext, action: Action) -> str:
    """The harness tools: ``read_skill NAME`` and ``run_skill NAME SCRIPT [ARGS]`` (sandboxed)."""
    name = action.args[0] if action.args else ""
    skill = ctx.skill(name)
    if skill is None:
        return f"no skill named {name!r}; skills: {', '.join(s.name for s in ctx.skills) or '(none)'}"
    if action.tool == "read_skill":
        return skill.body
    if action.tool == "run_skill":
        from evolver.sandbox import run_script
        if len(action.args) < 2:
            return "usage: run_skill NAME SCRIPT [ARGS...]"
        script = Path(skill.path) / "scripts" / Path(action.args[1]).name
        if not script.exists():
            return f"skill {name} has no script {action.args[1]!r}; scripts: {', '.join(skill.scripts) or '(none)'}"
        res = run_script(script, list(action.args[2:]), timeout_s=10, packages=skill.packages)
        status = "timed out" if res.timed_out else ("memory limit exceeded" if res.memory_exceeded
                                                     else f"exit {res.returncode}")
        return f"[{status}]\n{res.stdout}{res.stderr}"
    return f"unknown tool {action.tool!r}"


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

