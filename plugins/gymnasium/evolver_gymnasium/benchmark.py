"""A Gymnasium environment as an evolver benchmark: a task is one episode from one reset seed.

Observations are text: the environment's own when they are strings, else its ANSI rendering
(``render_mode="ansi"``; a highlighted cell in brackets, coloured text followed by its colour's name,
since a rendering may say by colour alone what a letter stands for), else the observation written out. Actions are text
(a ``Text`` action space), or the names of a ``Discrete`` space's actions (``action_names``, one per
action; by default the numbers), listed as the valid actions of every step. The score is the
episode's return mapped from ``score_range`` onto 0..1 and clipped; ``won`` is a score of 1. Splits
are disjoint ranges of reset seeds, so they never share an episode.
"""
from __future__ import annotations

import re

from evolver import Benchmark, BenchmarkError, Env, Observation, Task

SPLIT_SEEDS = {"train": 0, "dev": 100_000, "test": 200_000}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STYLED = re.compile(r"\x1b\[([0-9;]*)m(.*?)(?=\x1b\[)", re.S)  # text up to the next code
COLOURS = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")


def _styled(m: re.Match) -> str:
    codes = {int(c) for c in m.group(1).split(";") if c.isdigit()}
    text = m.group(2)
    if not text or not codes - {0}:
        return text
    if codes & {7, *range(40, 48), *range(100, 108)}:  # a background colour: the cell in focus
        return f"[{text}]"
    fg = sorted(codes & {*range(30, 38), *range(90, 98)})
    return f"{text}<{COLOURS[fg[0] % 10]}>" if fg and text.strip() else text


def plain(rendered: str) -> str:
    """An ANSI rendering as plain text: highlighted text (the player's cell, say) in brackets, coloured
    text followed by its colour's name in angle brackets (``R<blue>``: Taxi marks the passenger so), other
    codes dropped."""
    return _ANSI.sub("", _STYLED.sub(_styled, rendered)).strip("\n")


class GymEnv(Env):
    def __init__(self, bench: "GymBenchmark", task: Task):
        self.bench, self.task = bench, task
        self.env = bench.make()
        self.total = 0.0
        self.done = False

    def _text(self, obs) -> str:
        if isinstance(obs, str):
            return obs
        if not self.bench.ansi:  # rendering without a mode only warns: the observation is written out
            return repr(obs)
        try:
            shown = self.env.render()
        except Exception:  # noqa: BLE001 - an environment without an ANSI rendering: write the observation
            shown = None
        return plain(shown) if isinstance(shown, str) and shown.strip() else repr(obs)

    def _observe(self, obs, text: str = "") -> Observation:
        score = self.bench.score(self.total)
        shown = f"{text}\n{self._text(obs)}" if text else self._text(obs)
        return Observation(shown, actions=list(self.bench.action_names or []), score=score, done=self.done,
                           info={"won": self.done and score >= 1.0, "return": self.total})

    def reset(self) -> Observation:
        obs, _ = self.env.reset(seed=self.task.seed)
        self.total, self.done = 0.0, False
        return self._observe(obs)

    def step(self, action: str) -> Observation:
        if self.done:
            return self._observe(None, "The episode is over.")
        names = self.bench.action_names
        if names is not None:
            said = (action or "").strip().lower()
            if said not in [n.lower() for n in names]:
                return Observation(f"Unknown action {action!r}; valid actions: {', '.join(names)}.",
                                   actions=list(names), score=self.bench.score(self.total))
            action = [n.lower() for n in names].index(said)
        obs, reward, terminated, truncated, _ = self.env.step(action)
        self.total += float(reward)
        self.done = bool(terminated or truncated)
        return self._observe(obs, f"Reward {float(reward):g}." if reward else "")

    def close(self) -> None:
        self.env.close()


class GymBenchmark(Benchmark):
    name = "gym"
    public_seed = True  # the reset seed is what any player of the environment gets; it gives no answer away

    def __init__(self, env: str, kwargs: dict | None = None, action_names: list[str] | None = None,
                 task: str = "", score_range: tuple[float, float] = (0.0, 1.0), max_steps: int = 50):
        """``env``: a registered Gymnasium id; ``kwargs``: its ``gymnasium.make`` arguments; ``action_names``:
        one name per action of a ``Discrete`` space (default: their numbers); ``task``: what the agent is
        told (default: the environment's own description, its docstring's first paragraph);
        ``score_range``: the returns that map to scores 0 and 1."""
        try:
            import gymnasium
        except ImportError as exc:
            raise BenchmarkError("the gym benchmark needs gymnasium: pip install -e plugins/gymnasium") from exc
        self._gym, self.env_id, self.kwargs = gymnasium, env, dict(kwargs or {})
        if env not in gymnasium.registry:
            near = [k for k in gymnasium.registry if k.split("-")[0].lower() == env.split("-")[0].lower()]
            raise BenchmarkError(f"no Gymnasium environment {env!r}" + (f"; did you mean {near[0]!r}?" if near else
                                 "; `python -c 'import gymnasium; print(list(gymnasium.registry))'` lists them"))
        lo, hi = (float(x) for x in score_range)
        if hi <= lo:
            raise BenchmarkError(f"score_range {list(score_range)}: the second return must exceed the first")
        self.lo, self.hi, self.max_steps = lo, hi, int(max_steps)
        self.categories = [env]
        probe = gymnasium.make(env, **self.kwargs)
        try:
            # An ANSI rendering is asked for only where the environment lists one (asking others makes gymnasium warn).
            self.ansi = "ansi" in ((probe.metadata or {}).get("render_modes") or ())
            space = probe.action_space
            if isinstance(space, gymnasium.spaces.Discrete):
                names = [str(n) for n in (action_names or range(int(space.n)))]
                if len(names) != int(space.n):
                    raise BenchmarkError(f"action_names has {len(names)} names; {env} has {int(space.n)} actions")
                self.action_names: list[str] | None = names
            elif isinstance(space, gymnasium.spaces.Text):
                self.action_names = None
            else:
                raise BenchmarkError(f"{env}'s action space {space} is neither Discrete nor Text: no text shape")
            doc = (type(probe.unwrapped).__doc__ or "").strip().split("\n\n")[0]
            self.task_text = task or " ".join(doc.split()) or f"Play {env}."
        finally:
            probe.close()

    def make(self):
        if self.ansi:
            try:
                return self._gym.make(self.env_id, render_mode="ansi", **self.kwargs)
            except Exception:  # noqa: BLE001 - no ANSI rendering after all: observations are written out
                pass
        return self._gym.make(self.env_id, **self.kwargs)

    def score(self, total: float) -> float:
        return min(1.0, max(0.0, (total - self.lo) / (self.hi - self.lo)))

    def tasks(self, split: str, per_category: int | None = None) -> list[Task]:
        if split not in SPLIT_SEEDS:
            raise BenchmarkError(f"unknown split {split!r}; splits: {', '.join(SPLIT_SEEDS)}")
        n = per_category or 20
        actions = f" Actions: {', '.join(self.action_names)}." if self.action_names else ""
        return [Task(id=f"gym/{self.env_id}/{split}/{i}", benchmark=self.name, split=split, category=self.env_id,
                     seed=SPLIT_SEEDS[split] + i, prompt=f"{self.task_text}{actions}", max_steps=self.max_steps)
                for i in range(n)]

    def env(self, task: Task) -> Env:
        return GymEnv(self, task)
