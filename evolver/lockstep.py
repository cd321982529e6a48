"""Episodes in lockstep: every live episode's next model call answered in one batch per round.

One episode's path: the benchmark's environment resets -> the harness builds the context -> the
backend answers, batched across every live episode -> the harness parses an action (or a tool call) ->
the environment steps -> ... -> the score. A slot freed by a finished episode is refilled at once.
Each harness call runs under :data:`HARNESS_CALL_S`; one episode's failure (harness crash, env error,
garbage output) is a score of 0 with its error and the trace so far, and only a systemic failure
(:class:`~evolver.errors.BackendError`, :class:`~evolver.errors.BenchmarkError`) raises.
:mod:`evolver.evaluate` decides what plays (the cache, the store, the cluster) and calls this.
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
from typing import Callable, Iterator

from evolver.errors import BackendError, BenchmarkError
from evolver.harness import Action, ProgramContext, make_harness, task_for_harness
from evolver.types import ChoiceRequest, ChoiceResult, Episode, GenRequest, GenResult, Observation, Step, stable_hash

REPLAY_DIVERGED = "replay diverged"


class Live:
    """One episode in flight: its episode so far, harness, environment and pending request."""

    def __init__(self, episode: Episode, ctx: ProgramContext, harness, max_steps: int, key=None, backend=None,
                 monitor=None, replay=None):
        self.episode, self.ctx, self.harness, self.max_steps, self.key = episode, ctx, harness, max_steps, key
        self.backend, self.monitor = backend, monitor
        self.replay = list(replay or [])  # recorded steps that answer its first model calls
        self.env, self.state, self.obs = None, None, Observation("", done=True)
        self.started = time.perf_counter()
        self.request = None
        self.done = False


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


def try_harness(ctx: ProgramContext, factory: Callable | None = None):
    """A harness that fails to build fails its program's episodes, not the whole evaluation."""
    try:
        return (factory or make_harness)(ctx)
    except Exception as exc:
        return exc


def play_lockstep(lives: Iterator[Live], benchmark, max_live: int, finished: Callable[[list[Live]], None]) -> None:
    """Advance up to ``max_live`` episodes in lockstep, one batched model call per round; a slot freed
    by a finished episode is refilled by the next one at once (not when a whole wave is done), so the
    batch stays full while episodes of different lengths finish at different rounds."""
    for done in play_iter(lives, benchmark, max_live):
        finished(done)  # stored as they finish: a run killed now loses only the live ones


def play_iter(lives: Iterator[Live], benchmark, max_live: int) -> Iterator[list[Live]]:
    """:func:`play_lockstep` as a generator of the episodes that finish together (a cluster worker streams them)."""
    live: list[Live] = []
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


def _answer_round(live: list[Live]) -> list[tuple[list[Live], list, float]]:
    """Every live episode's pending request answered: ``(episodes, answers, seconds)`` per call made.

    Requests are grouped by backend and kind (generation, choice). Each group is lowered to plain
    generations (:meth:`Backend.lowered`) where its backend can, and the lowered groups that reach the
    same engine are answered by ONE ``generate`` call: a sampled and a greedy player of the same
    weights share every batch. A group that cannot be lowered is answered by its backend directly."""
    groups: dict[tuple[int, bool], list[Live]] = {}
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


def _replayed(lv: Live):
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


def _with_seed(lv: Live):
    """The request with a seed of its episode's own (episode seed, task, step) unless the harness set
    one: a sampling backend (``seeded_by_episode``) then draws the same reply on a rerun, whatever
    else shares the batch and whichever episodes the cache spared."""
    if lv.request.seed is not None:
        return lv.request
    ep = lv.episode
    return dataclasses.replace(lv.request, seed=int(stable_hash(ep.seed, ep.task.id, len(ep.steps)), 16) % 2 ** 31)


def _start(lv: Live, benchmark) -> None:
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


def _close(lv: Live) -> None:
    if lv.env is not None:
        try:
            lv.env.close()
        except Exception:
            pass
        lv.env = None
    lv.episode.wall_s = time.perf_counter() - lv.started
    lv.episode.tally()


def _ask(lv: Live) -> None:
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


def _act(lv: Live, answer, latency: float) -> None:
    ep, request = lv.episode, lv.request
    prompt = json.dumps([asdict(m) for m in request.messages], ensure_ascii=False)
    step = Step(index=len(ep.steps), prompt=prompt, output="", action="", observation="",
                prompt_tokens=answer.prompt_tokens, completion_tokens=answer.completion_tokens,
                latency_s=latency, error=answer.error)
    gen = answer if isinstance(answer, GenResult) else getattr(answer, "sample", None)
    if gen is not None and gen.completion_ids is not None:
        # "replayed": the reply was an earlier episode's (Job.replay), not the model's now
        step.sample = {"prompt_ids": gen.prompt_ids, "completion_ids": gen.completion_ids,
                       "logprobs": gen.logprobs, "state": lv.obs.text, "text": gen.text, "grammar": gen.grammar,
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


def _finish(lv: Live) -> None:
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
