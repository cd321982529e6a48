"""Judge-scored tasks: rewards for tasks with no verifier, from a judge model that ranks the episodes of
one task together against the benchmark's rubric (relative ranking of a group, as ART's RULER does).

A task is judge-scored when ``Benchmark.rubric(task)`` gives text (by default ``task.meta["rubric"]``).
:func:`evolver.evaluate.evaluate_many` holds such a task's episodes until every episode of it in the
evaluation has played (every program and seed; GRPO's group), then :func:`judge_groups` scores them:

- The judge (the run's ``judge`` role) reads the task, the rubric and each episode as a trajectory (each
  action and what came back), cut visibly in the middle to a share of its context window, and scores every
  attempt 0-10.
- It is asked twice, the second time with the attempts in reverse order, because judges favour positions:
  the normalised Kendall distance between the two orders (0: the same, 1: reversed) is recorded as the
  group's ``disagreement``.
- Each pass's scores become rank rewards (best 1, worst 0, ties share); an episode's reward is the mean of
  the two passes. Rewards are relative to the group they were judged in, so compare programs whose
  episodes were judged together (the final test's seed and best are, whatever weights each plays with).
- A group of one is scored against the rubric alone, asked once: its reward is the score / 10.
- A reply that does not score every attempt gives that pass no signal; with no readable pass every episode
  gets 0.5 (equal rewards: a GRPO group with no spread) and the error is recorded.
- An episode that failed (``error``) keeps its 0 and is not shown to the judge.

The reward replaces the episode's ``score`` and ``rewards["score"]`` (``won`` stays the environment's);
the environment's own score stays in the trace as the last step's ``reward``. Each group's call is a row of
the store's ``judgements`` table (``Store.judgements``), and the judge's tokens count under its role.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from evolver.harness import context_window_of, cut_marker
from evolver.types import Episode, GenRequest, Message, Task

SCALE = 10.0  # the judge scores 0..SCALE: a score is one or two tokens, and ties stay possible
# Each attempt's share of the judge's window, at least and at most: the floor keeps a small model's judge
# reading something of every attempt, the ceiling keeps a 128k window from making every call that long.
TRAJECTORY_TOKENS = (64, 2000)
NO_SIGNAL = 0.5  # every episode's reward when no pass could be read
SYSTEM = ("You judge attempts at a task. Compare the attempts with each other, check each against the rubric, "
          "and score each one.")
_SCORE = re.compile(r"attempt\s*#?\s*(\d+)\s*[:=\-]\s*(\d+(?:\.\d+)?)", re.IGNORECASE)


def rubric_of(benchmark, task: Task) -> str | None:
    """The rubric ``benchmark`` gives ``task`` (None: scored by its environment)."""
    rubric = getattr(benchmark, "rubric", None)
    text = rubric(task) if callable(rubric) else None
    return str(text) if text else None


@dataclass
class Judgement:
    """One group's verdict: rewards in the order of ``episodes`` (failed ones included, at 0)."""

    task: Task
    rubric: str
    episodes: list[Episode]
    rewards: list[float] = field(default_factory=list)
    #: Per pass, the scores by episode (None for the pass: its reply was unreadable; for an episode: not shown).
    passes: list[list[float | None] | None] = field(default_factory=list)
    disagreement: float | None = None
    error: str | None = None
    replies: list[str] = field(default_factory=list)
    prompt_chars: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str = ""

    def apply(self) -> None:
        """The rewards become the episodes' scores."""
        for ep, reward in zip(self.episodes, self.rewards):
            ep.score = reward
            ep.rewards = {**ep.rewards, "score": reward}

    def row(self) -> dict:
        """The store's ``judgements`` row (``Store.add_judgements``); the environment's scores are the
        episodes' last step rewards."""
        eps = self.episodes
        return {"benchmark": self.task.benchmark, "task_id": self.task.id, "split": self.task.split,
                "purpose": ",".join(sorted({e.purpose for e in eps})), "judge_model": self.model,
                "episode_ids": [e.id for e in eps], "env_scores": [env_score(e) for e in eps],
                "rewards": self.rewards, "passes": self.passes, "disagreement": self.disagreement,
                "error": self.error, "calls": len(self.replies), "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "prompt_chars": self.prompt_chars,
                # Byte-level decoding can leave lone surrogates, which are not UTF-8 (nor JSON the store takes).
                "replies": [r.encode("utf-8", "replace").decode("utf-8") for r in self.replies]}


def env_score(episode: Episode) -> float:
    """The environment's own score of an episode: its last step's running score (0 with no step)."""
    return float(episode.steps[-1].reward) if episode.steps else 0.0


def fit(text: str, budget: int, count: Callable[[str], int]) -> str:
    """``text`` within ``budget`` tokens: its middle cut with a visible marker (the first steps and the
    end of an attempt say the most)."""
    n = count(text)
    if n <= budget:
        return text
    keep = len(text) * budget // n // 2
    head, tail = text[:keep], text[len(text) - keep:] if keep else ""
    return f"{head}\n{cut_marker(max(1, n - count(head) - count(tail)))}\n{tail}"


def trajectory(episode: Episode) -> str:
    """What the agent did and what came back, one step a line."""
    lines = []
    for s in episode.steps:
        if s.tool_calls:
            did = "; ".join(f"tool {c.get('tool')} {' '.join(map(str, c.get('args') or []))}".strip()
                            for c in s.tool_calls)
        else:
            did = s.action or s.output
        lines.append(f"{s.index + 1}. {_line(did)}\n   -> {_line(s.observation)}")
    return "\n".join(lines) or "(the attempt took no step)"


def _line(text: str | None) -> str:
    return " ".join((text or "").split()) or "(nothing)"


def prompt(task: Task, rubric: str, attempts: list[str], count: Callable[[str], int], window: int) -> list[Message]:
    """The judge's messages: task, rubric, the attempts in the order shown, and the reply's form."""
    share = min(TRAJECTORY_TOKENS[1], max(TRAJECTORY_TOKENS[0], window // (2 * max(1, len(attempts)))))
    shown = "\n\n".join(f"Attempt {k + 1}:\n{fit(a, share, count)}" for k, a in enumerate(attempts))
    n = len(attempts)
    ask = (f"Score each attempt from 0 (ignores the rubric) to {SCALE:g} (meets it fully); a better attempt gets "
           f"a higher score. Answer with exactly one line per attempt and nothing else:\n"
           if n > 1 else f"Score the attempt from 0 (ignores the rubric) to {SCALE:g} (meets it fully). "
                         "Answer with one line and nothing else:\n")
    ask += "\n".join(f"Attempt {k + 1}: <score>" for k in range(n))
    user = (f"Task:\n{fit(task.prompt, window // 8, count)}\n\nRubric:\n{fit(rubric, window // 8, count)}\n\n"
            "Each attempt lists the agent's actions in order, each followed by \"->\" and what it was told "
            f"back.\n\n{shown}\n\n{ask}")
    return [Message("system", SYSTEM), Message("user", user)]


def parse_scores(text: str, n: int) -> tuple[list[float] | None, str | None]:
    """The score of each of ``n`` attempts in a reply (``Attempt K: S``), or None and why not."""
    found: dict[int, float] = {}
    for m in _SCORE.finditer(text or ""):
        k = int(m.group(1))
        if 1 <= k <= n and k not in found:
            found[k] = min(SCALE, float(m.group(2)))
    missing = [k for k in range(1, n + 1) if k not in found]
    if missing:
        return None, (f"the judge's reply scored {n - len(missing)} of {n} attempts (none for attempt "
                      f"{', '.join(map(str, missing))}): {(text or '')[:200]!r}")
    return [found[k] for k in range(1, n + 1)], None


def rank_rewards(scores: list[float]) -> list[float]:
    """Rewards in [0, 1] from one pass's scores: best 1, worst 0, ties share; a lone attempt's score / SCALE."""
    n = len(scores)
    if n == 1:
        return [max(0.0, min(1.0, scores[0] / SCALE))]
    return [(sum(s < x for s in scores) + 0.5 * (sum(s == x for s in scores) - 1)) / (n - 1) for x in scores]


def kendall_distance(a: list[float], b: list[float]) -> float:
    """Normalised Kendall distance between two scorings of the same items: the share of pairs they order
    differently (a pair tied in one and not the other counts half); 0 for fewer than two items."""
    sign = lambda x: (x > 0) - (x < 0)  # noqa: E731
    pairs = [(i, j) for i in range(len(a)) for j in range(i + 1, len(a))]
    if not pairs:
        return 0.0
    return sum(abs(sign(a[i] - a[j]) - sign(b[i] - b[j])) / 2 for i, j in pairs) / len(pairs)


def judge_groups(judge, groups: list[tuple[Task, str, list[Episode]]]) -> list[Judgement]:
    """Each group ``(task, rubric, episodes)`` judged; every pass of every group goes to ``judge`` (a
    :class:`evolver.Backend`) in ONE batch. The episodes are not changed (:meth:`Judgement.apply` does that)."""
    count, window = judge.count_tokens, context_window_of(judge)
    verdicts, asks = [], []  # asks: (verdict, order of the episodes shown, request)
    for task, rubric, episodes in groups:
        v = Judgement(task, rubric, list(episodes), model=str(getattr(judge, "model", "")))
        verdicts.append(v)
        alive = [i for i, e in enumerate(v.episodes) if not e.error]
        orders = [alive, alive[::-1]] if len(alive) > 1 else [alive] if alive else []
        for order in orders:
            messages = prompt(task, rubric, [trajectory(v.episodes[i]) for i in order], count, window)
            v.prompt_chars += sum(len(m.content) for m in messages)
            reply = 8 * len(order) + 16  # "Attempt K: S" a line, with room for a stray word
            asks.append((v, order, GenRequest(messages=messages, max_tokens=reply, temperature=0.0)))
    results = judge.generate([r for _, _, r in asks]) if asks else []
    for (v, order, _), res in zip(asks, results):
        v.replies.append(res.text)
        v.prompt_tokens += res.prompt_tokens
        v.completion_tokens += res.completion_tokens
        scores, error = (None, f"the judge failed: {res.error}") if res.error else parse_scores(res.text, len(order))
        if scores is None:
            v.passes.append(None)
            v.error = error if v.error is None else f"{v.error}; {error}"
        else:
            by_episode: list = [None] * len(v.episodes)  # None: not shown (a failed episode)
            for i, s in zip(order, scores):
                by_episode[i] = s
            v.passes.append(by_episode)
    for v in verdicts:
        _reward(v)
    return verdicts


def _reward(v: Judgement) -> None:
    """Rewards from the readable passes; the disagreement when both passes were read."""
    alive = [i for i, e in enumerate(v.episodes) if not e.error]
    read = [p for p in v.passes if p is not None]
    v.rewards = [0.0] * len(v.episodes)
    if not alive:
        return
    if not read:
        for i in alive:
            v.rewards[i] = NO_SIGNAL
        return
    per_pass = [rank_rewards([p[i] for i in alive]) for p in read]
    for k, i in enumerate(alive):
        v.rewards[i] = sum(r[k] for r in per_pass) / len(per_pass)
    if len(read) == 2 and len(alive) > 1:
        v.disagreement = kendall_distance([read[0][i] for i in alive], [read[1][i] for i in alive])


class Judging:
    """Judge-scored episodes held as they finish, and judged per task once all have played. One
    :func:`evolver.evaluate.evaluate_many` call makes and finishes its own; a caller whose evaluation spans
    several calls (:func:`evolver.playing.play`: one per checkpoint) shares one and finishes it, so a task's
    episodes are ranked together whichever weights played them."""

    def __init__(self, rubrics: dict[tuple[str, str], str], judge: Callable, store=None, run_id: str = ""):
        """``rubrics``: by (benchmark, task id); ``judge()`` makes the judge backend when first needed."""
        self.rubrics, self.judge, self.store, self.run_id = rubrics, judge, store, run_id
        self.held: list[tuple[Episode, Callable]] = []  # each with how to release it (store, announce)

    @classmethod
    def of(cls, benchmark, tasks: list[Task], run=None, judge=None, store=None) -> "Judging | None":
        """None when no task has a rubric, or there is no judge: neither ``judge`` (a backend) nor a ``run``
        whose ``backend("judge")`` makes one (only then: a judge that is never asked is never loaded)."""
        make = (lambda: judge) if judge is not None else (
            (lambda: run.backend("judge")) if callable(getattr(run, "backend", None)) else None)
        rubrics = {_key(t): r for t in tasks if (r := rubric_of(benchmark, t))} if make else {}
        return cls(rubrics, make, store, getattr(run, "id", "") or "") if rubrics else None

    def hold(self, episodes: list[Episode], release: Callable[[list[Episode]], None]) -> list[Episode]:
        """Keep the judge-scored ones, to ``release`` once judged; return the rest, to release now."""
        self.held += [(e, release) for e in episodes if _key(e.task) in self.rubrics]
        return [e for e in episodes if _key(e.task) not in self.rubrics]

    def finish(self) -> list[Judgement]:
        """Judge every held group, release its episodes with their rewards as scores, record the verdicts.
        Should the judge fail outright, the episodes are released with their environment's scores before
        the error goes on, so no trace is lost."""
        held, self.held = self.held, []
        groups: dict[tuple, list[Episode]] = {}
        for e, _ in held:
            groups.setdefault(_key(e.task), []).append(e)
        if not groups:
            return []
        try:
            self._load_steps([e for e, _ in held])
            verdicts = judge_groups(self.judge(), [(eps[0].task, self.rubrics[k], eps) for k, eps in groups.items()])
        except BaseException:
            _release(held)
            raise
        for v in verdicts:
            v.apply()
        _release(held)  # the store gives new episodes their ids here, before the verdicts name them
        if self.store is not None:
            self.store.add_judgements(self.run_id, [v.row() for v in verdicts])
        return verdicts

    def abandon(self) -> None:
        """Release what is held, unjudged (an evaluation stopped midway: a resume judges them again)."""
        held, self.held = self.held, []
        _release(held)

    def _load_steps(self, episodes: list[Episode]) -> None:
        """A cached episode comes without its steps: the judge needs them to rank it with the others."""
        bare = [e for e in episodes if e.cached and not e.steps and e.id]
        if bare and self.store is not None:
            full = {e.id: e for e in self.store.episodes(ids=[e.id for e in bare], with_steps=True)}
            for e in bare:
                if e.id in full:
                    e.steps = full[e.id].steps


def _release(held: list[tuple[Episode, Callable]]) -> None:
    """Each release callable once, with its episodes in the order they were held."""
    by: dict[int, tuple[Callable, list[Episode]]] = {}
    for e, release in held:
        by.setdefault(id(release), (release, []))[1].append(e)
    for release, episodes in by.values():
        release(episodes)


def _key(task: Task) -> tuple[str, str]:
    return (task.benchmark, task.id)
