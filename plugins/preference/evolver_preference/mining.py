"""Preference pairs mined from the trace store: the same task played better and worse.

Two kinds, one per trainer:

- **Episode pairs** (``dpo``): two episodes of one task whose scores differ by at least ``min_gap``
  and whose first prompt is the same (the same task rendered the same way: DPO compares two answers
  to one prompt, and only then does the partition term of its implicit reward cancel). The
  completion of a side is its whole trajectory: every model call's output under that call's own
  prompt, so its log-probability is the sum over the episode's steps. The environment's replies sit
  in the later prompts and cancel between policy and reference, which makes this trajectory-level
  DPO exact for multi-turn episodes; a single-step episode is ordinary DPO.
- **Step pairs** (``step-dpo``, and ``evolver export --format preference``): a worse episode aligned
  to a better one of the same task, step by step while their prompts (the state) stay equal; the
  first step whose action differs is where the worse one left the better one's path. The pair is
  that state's messages, the better step's output (chosen) and the worse one's (rejected). Pairs
  whose prompts part before any action differs (a stochastic environment) give nothing.

Episodes with an error, and steps without output (tool calls), never contribute.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import product

from evolver import Episode


@dataclass
class Turn:
    """One model call: the chat messages it saw and what it wrote."""
    prompt: list[dict]
    completion: str


@dataclass
class Pair:
    """A preference: ``chosen`` beat ``rejected`` on ``task_id``. One turn per side for step pairs; a
    trajectory's every call for episode pairs (both start from ``prompt``)."""
    task_id: str
    chosen: list[Turn]
    rejected: list[Turn]
    score_chosen: float
    score_rejected: float
    chosen_episode: str = ""
    rejected_episode: str = ""
    step: int = 0  # the step index of a step pair (0 for an episode pair)

    @property
    def prompt(self) -> list[dict]:
        return self.chosen[0].prompt


def load_episodes(store, runs=(), programs=(), split: str | None = "train",
                  purposes: list[str] | None = None) -> list[Episode]:
    """Episodes with steps from ``runs`` and ``programs`` (ids; empty: any), on ``split`` (None: any),
    of ``purposes`` (None: any), without errors; each once, in insertion order."""
    seen: dict[str, Episode] = {}
    for run_id, program_id in product(list(runs) or [None], list(programs) or [None]):
        for ep in store.episodes(run_id=run_id, program_id=program_id, split=split, with_steps=True):
            if ep.error or not ep.steps or (purposes is not None and ep.purpose not in purposes):
                continue
            seen.setdefault(ep.id, ep)
    return list(seen.values())


def turns(ep: Episode) -> list[Turn]:
    """The episode's model calls that wrote something, as (messages, output)."""
    return [Turn(messages(s.prompt), s.output) for s in ep.steps if s.output and not s.tool_calls]


def messages(prompt: str) -> list[dict]:
    """A stored step's prompt (JSON chat messages) as ``[{"role", "content"}]``."""
    return [{"role": m["role"], "content": m["content"]} for m in json.loads(prompt)]


def by_task(episodes: list[Episode]) -> dict[str, list[Episode]]:
    out: dict[str, list[Episode]] = {}
    for ep in episodes:
        out.setdefault(ep.task.id, []).append(ep)
    return out


def ranked(group: list[Episode], min_gap: float) -> list[tuple[Episode, Episode]]:
    """(better, worse) pairs of ``group`` whose scores differ by more than 0 and at least ``min_gap``,
    the widest gap first (ties: the better one's higher score, then insertion order)."""
    order = sorted(range(len(group)), key=lambda i: -group[i].score)  # stable: insertion order within a score
    pairs = [(group[a], group[b]) for k, a in enumerate(order) for b in order[k + 1:]
             if group[a].score - group[b].score > 0 and group[a].score - group[b].score >= min_gap]
    return sorted(pairs, key=lambda p: (-(p[0].score - p[1].score), -p[0].score))


def episode_pairs(episodes: list[Episode], min_gap: float = 0.0, max_per_task: int | None = 4) -> list[Pair]:
    """Episode pairs (module docstring): same task, same first prompt, scores ``min_gap`` apart; at most
    ``max_per_task`` per task (None: all), the widest gaps first."""
    out: list[Pair] = []
    for task_id, group in by_task(episodes).items():
        buckets: dict[str, list[Episode]] = {}
        for ep in group:
            if turns(ep):
                buckets.setdefault(ep.steps[0].prompt, []).append(ep)
        found, seen = [], set()
        for bucket in buckets.values():
            for hi, lo in ranked(bucket, min_gap):
                c, r = turns(hi), turns(lo)
                key = json.dumps([[[t.prompt, t.completion] for t in side] for side in (c, r)])
                if [t.completion for t in c] != [t.completion for t in r] and key not in seen:
                    seen.add(key)  # two episodes that played alike make one pair, not two
                    found.append(Pair(task_id, c, r, hi.score, lo.score, hi.id, lo.id))
        found.sort(key=lambda p: -(p.score_chosen - p.score_rejected))
        out += found[:max_per_task] if max_per_task is not None else found
    return out


def divergence(better: Episode, worse: Episode) -> int | None:
    """The first step where ``worse`` left ``better``'s path: the prompts equal up to and at it, the
    actions (the outputs, for steps without a parsed action) different. None when they part otherwise."""
    for i, (a, b) in enumerate(zip(better.steps, worse.steps)):
        if a.prompt != b.prompt:
            return None
        if (a.action or a.output) != (b.action or b.output):
            return i if a.output and b.output and not a.tool_calls and not b.tool_calls else None
    return None


def step_pairs(episodes: list[Episode], min_gap: float = 0.0, max_per_task: int | None = 4) -> list[Pair]:
    """Step pairs (module docstring): at most ``max_per_task`` per task, each (state, chosen, rejected) once."""
    out: list[Pair] = []
    for task_id, group in by_task(episodes).items():
        seen: set[tuple] = set()
        found = []
        for hi, lo in ranked(group, min_gap):
            i = divergence(hi, lo)
            if i is None:
                continue
            a, b = hi.steps[i], lo.steps[i]
            key = (a.prompt, a.output, b.output)
            if key in seen:
                continue
            seen.add(key)
            found.append(Pair(task_id, [Turn(messages(a.prompt), a.output)], [Turn(messages(b.prompt), b.output)],
                              hi.score, lo.score, hi.id, lo.id, step=i))
        out += found[:max_per_task] if max_per_task is not None else found
    return out


def mine(store, kind: str, runs=(), programs=(), split: str | None = "train", min_gap: float = 0.0,
         max_per_task: int | None = 4, purposes: list[str] | None = None) -> list[Pair]:
    """``episode`` or ``step`` pairs from the store's episodes of ``runs`` / ``programs`` on ``split``."""
    episodes = load_episodes(store, runs, programs, split, purposes)
    miner = {"episode": episode_pairs, "step": step_pairs}[kind]
    return miner(episodes, min_gap=min_gap, max_per_task=max_per_task)
