"""From played episodes to training samples.

A trajectory is one episode; a sample is one model call of it (multi-turn episodes train
step-wise), holding the exact prompt and completion token ids the rollout engine saw and produced,
taken from ``Step.sample``: never re-rendered, because the skills in the prompt may have changed
since. Rewards stay named and separate (the benchmark's score, its sub-rewards, format rewards), so
multi-reward estimators can treat them apart.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from evolver import Episode
from evolver_grpo.advantages import Trajectory


class Member(str):
    """A rollout's group id (its task's, as a ``str``) that also names the tree it grew in under
    Tree-GRPO sampling (``evolver_grpo.tree``); a plain ``str`` group id is a tree of its own."""

    tree: str

    def __new__(cls, group: str, tree: str = "") -> "Member":
        obj = super().__new__(cls, group)
        obj.tree = tree
        return obj


@dataclass
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    rollout_logprobs: list[float] | None
    traj: int  # index of its trajectory in the batch
    step: int  # index among the trajectory's trained steps
    advantage: float = 0.0
    #: The grammar its reply was decoded under (a tool call), None when free: log-probs are recomputed
    #: under the same masks.
    grammar: str | None = None


def format_rewards(ep: Episode, names: list[str], eos_ids: set[int], regex: str | None) -> dict[str, float]:
    """Optional format rewards in 0..1, each the fraction of the episode's model calls that pass.

    ``eos``: the completion ended by itself (not cut at the token limit); ``regex``: the output
    matches ``format_regex`` (e.g. an answer tag)."""
    out: dict[str, float] = {}
    calls = [s for s in ep.steps if s.sample]
    for name in names:
        if name == "eos":
            ok = [bool(s.sample["completion_ids"]) and s.sample["completion_ids"][-1] in eos_ids for s in calls]
        elif name == "regex":
            if not regex:
                raise ValueError("format reward 'regex' needs format_regex")
            ok = [re.search(regex, s.output or "") is not None for s in calls]
        else:
            raise ValueError(f"unknown format reward {name!r}; known: eos, regex")
        out[name] = sum(ok) / len(ok) if ok else 0.0
    return out


def collect(episodes: list[Episode], group_of: list[str], *, format_names: list[str] = (),
            eos_ids: set[int] = frozenset(), format_regex: str | None = None,
            reward_names: list[str] | None = None, monitor_flags: str = "keep",
            monitor_penalty: float = 1.0) -> tuple[list[Trajectory], list[Sample]]:
    """Trajectories (one per episode, in order) and their samples.

    An episode that failed before any model call still counts in its group (score 0, no samples).
    ``reward_names`` keeps only these rewards (default: all the episode reports, ``score`` first).
    Steps whose reply was replayed from another episode (a Tree-GRPO branch's prefix) are not trained
    here: they are that episode's samples.
    Steps the online monitor blocked (``Step.monitor``): ``monitor_flags`` "penalise" takes
    ``monitor_penalty`` off the episode's score reward, "mask" trains none of those steps (the rest of
    the rollout still counts), "keep" treats them as any other step."""
    trajs, samples = [], []
    for i, (ep, group) in enumerate(zip(episodes, group_of)):
        rewards = {"score": float(ep.score), **{k: float(v) for k, v in ep.rewards.items() if k != "score"}}
        if ep.error:  # a crashed episode keeps its 0 score; sub-rewards from before the crash do not count
            rewards = {k: 0.0 for k in rewards}
        rewards.update(format_rewards(ep, list(format_names), eos_ids, format_regex))
        blocked = {s.index for s in ep.steps if s.monitor and s.monitor.get("blocked")}
        if blocked and monitor_flags == "penalise":
            rewards["score"] = rewards.get("score", 0.0) - monitor_penalty
        if reward_names:
            rewards = {k: rewards.get(k, 0.0) for k in reward_names}
        calls = [s for s in ep.steps if s.sample and s.sample.get("completion_ids") and not s.sample.get("replayed")
                 and not (monitor_flags == "mask" and s.index in blocked)]
        trajs.append(Trajectory(group=str(group), rewards=rewards, tree=getattr(group, "tree", ""),
                                states=[str(s.sample.get("state", "")) for s in calls]))
        for k, s in enumerate(calls):
            samples.append(Sample(list(s.sample["prompt_ids"]), list(s.sample["completion_ids"]),
                                  s.sample.get("logprobs"), traj=i, step=k, grammar=s.sample.get("grammar")))
    return trajs, samples
