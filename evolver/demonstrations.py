"""Demonstrations: what a benchmark offers to imitate, replayed through a program's own harness.

A benchmark may offer, for a *training* task, a list of actions that solves it
(:meth:`evolver.benchmarks.base.Benchmark.demonstration`; by default ``Task.gold`` when that is a
list of actions, as a text game's gold path is). A benchmark without demonstrations offers none, and the
proposers that imitate them simply propose nothing.

A demonstration is replayed step by step in its real environment while the program's harness builds
every prompt, exactly as it would in an episode (its skills chosen by the ``select_skills`` hook, its
history, its observation formatting); the demonstrated action is forced instead of asking a model.
The result is an ordinary :class:`Episode` (purpose ``gold``, model ``gold``) with one step per model
call the harness would have made, each holding the exact prompt (the chat messages as JSON): the
training data of imitation, cold-start SFT and bank seeding. Dev and test tasks are refused.
"""
from __future__ import annotations

import json
from dataclasses import asdict

from evolver import tool_calls
from evolver.errors import EvolverError
from evolver.harness import Action, make_harness, task_for_harness
from evolver.types import Episode, Program, Step, Task

GOLD_MODEL = "gold"


def has_gold(task: Task) -> bool:
    """Whether ``task.gold`` is a list of actions (a path a demonstration can replay)."""
    return isinstance(task.gold, list) and len(task.gold) > 0 and all(isinstance(a, str) for a in task.gold)


def demonstration(benchmark, task: Task) -> list[str] | None:
    """The benchmark's demonstration of ``task`` (a list of actions), or None."""
    offer = getattr(benchmark, "demonstration", None)
    actions = offer(task) if offer is not None else (list(task.gold) if has_gold(task) else None)
    return list(actions) if actions else None


def replay_gold(run, program: Program, tasks: list[Task], store: bool = True) -> list[Episode]:
    """One replayed episode per task the benchmark demonstrates (tasks without one are skipped)."""
    if any(t.split != "train" for t in tasks):
        raise EvolverError("demonstrations are for training tasks only: pass tasks of the 'train' split")
    harness = make_harness(run.context(program))
    shown = [(t, demonstration(run.benchmark, t)) for t in tasks]
    episodes = [replay(run, program, harness, t, actions) for t, actions in shown if actions]
    if store and episodes:
        run.store.add_episodes(episodes)
    return episodes


def replay_episodes(run, program: Program, episodes: list[Episode]) -> list[Episode]:
    """Re-render successful training episodes (a teacher's, an earlier policy's) through ``program``'s
    harness by forcing their actions, so their prompts are the ones this program would show. Not stored."""
    if any(e.task.split != "train" for e in episodes):
        raise EvolverError("only training episodes can be replayed into training data")
    harness = make_harness(run.context(program))
    out = []
    for e in episodes:
        actions = [s.action for s in e.steps if not s.tool_calls]
        out.append(replay(run, program, harness, e.task, actions, model=f"replay:{e.model}"))
    return out


def replay(run, program: Program, harness, task: Task, actions: list[str], model: str = GOLD_MODEL) -> Episode:
    """Play ``actions`` in the task's environment while ``harness`` renders every prompt."""
    ep = Episode(task=task, program_id=program.id, program_hash=program.hash, model=model, seed=0,
                 run_id=run.id, purpose="gold")
    env = run.benchmark.env(task)
    try:
        obs = env.reset()
        state = harness.start(task_for_harness(task, public_seed=getattr(run.benchmark, "public_seed", False)), obs)
        for action in actions:
            if obs.done:
                break
            request = harness.next_call(state, obs)
            if request is None:
                break
            prompt = json.dumps([asdict(m) for m in request.messages], ensure_ascii=False)
            action = _as_called(action, request)
            obs = env.step(action)
            ep.steps.append(Step(index=len(ep.steps), prompt=prompt, output=action, action=action,
                                 observation=obs.text, reward=obs.score))
            harness.observe(state, Action(env_action=action, output=action), obs.text)
            ep.prediction = action
        ep.score = max(0.0, min(1.0, float(obs.score)))
        ep.won = bool(obs.info.get("won", ep.score >= 1.0))
        ep.rewards = {"score": ep.score}
    except Exception as exc:  # one task's failure is that episode's error, never the whole replay
        ep.error = f"demonstration replay failed: {exc!r}"
        ep.score, ep.won = 0.0, False
    finally:
        env.close()
    return ep


class Demos:
    """Demonstrations: episodes played from a task's gold actions or from recorded ones, through a program's
    harness, so their steps hold the prompts that program builds (a namespace: ``Demos.replay_gold(...)``)."""

    has_gold = staticmethod(has_gold)
    replay_gold = staticmethod(replay_gold)
    replay_episodes = staticmethod(replay_episodes)


def _as_called(action: str, request) -> str:
    """A demonstrated call in the one form a tool-call request is answered in (``ToolCalls.action``: the name,
    then the arguments in their schema's order): imitation then trains the tokens the grammar lets the policy
    write, however the benchmark spelt its gold."""
    tools = getattr(request, "tools", None)
    call = tool_calls.parse(action) if tools and action.lstrip().startswith("{") else None
    return tool_calls.action(call, tools) if call else action
