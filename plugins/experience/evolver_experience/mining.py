"""Skills mined from experience: the store's steps turned into a skill of data and an observe script.

No model writes anything here. A *case* is one step of a training episode: the state it was taken in
(the task's first words, the observation before it, the action before it, the words the episode had
read before that its opening did not say), the action, and its value:
+1 when the step raised the score (``Step.reward``, the running score, went up), -1 when it lowered
it; any other step of an episode that was won is worth +0.5 when the next step was rewarded, halved
for each step further from a reward (the moves between two rewards: opening what holds the thing to
take, not a scripted demonstration's detours). Steps of lost episodes that changed nothing teach nothing and are left out.
The cases go to ``cases.json.gz`` in a skill folder beside ``scripts/observe.py``
(``notes/observe.py``), which the seed harness runs before every model call: it finds the nearest
cases to the episode so far and names the next move and what to avoid.

Nothing here names a benchmark: the cases come from any benchmark's rewards and won episodes, and a
mined skill grows by merging what the parent's copy held with what the store holds now.
"""
from __future__ import annotations

import gzip
import json
import shutil
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from evolver import Episode, SkillCaps, Skills, Task
from evolver_experience.notes.observe import TEXT_CHARS, codes, memory, task_text

OBSERVE = Path(__file__).with_name("notes") / "observe.py"
DATA_FILE = "cases.json.gz"
EPS = 1e-9
WON_STEP, WON_DISCOUNT = 0.5, 0.5  # the value of a won episode's unrewarded step, halved per step to the next reward
# What the folder may hold beside SKILL.md and the script, inside the skill caps' total size.
DATA_BYTES = SkillCaps.max_total_bytes - 40_000


@dataclass(frozen=True)
class Case:
    task: str  # the task's first words (what tells one kind of task from another)
    obs: str  # the observation the action answered ("" at the first step: the task text holds it)
    prev: str  # the action before ("" at the first step)
    action: str
    value: float
    codes: str  # where each word of the action comes from in its state (observe.codes)
    memory: str = ""  # what the episode had read before that its opening did not say (observe.memory)


def episode_cases(episode: Episode, limit: int | None = None, first: str = "") -> list[Case]:
    """The cases of one episode's steps (tool calls and empty actions skipped). ``limit``: the task's
    step limit; a lost episode that stopped before it was ended by its last move, which counts as one
    that lowered the score (a game lost on its first move never had a score to lower). ``first``: the
    task's first observation, which opens the transcript an observer reads after the task's text."""
    head = f"{episode.task.prompt}\n\n{first}" if first else episode.task.prompt
    steps = [s for s in episode.steps if s.action and not s.tool_calls and not s.error]
    rewards = [s.reward or 0.0 for s in steps]
    ended = bool(limit) and not episode.won and 0 < len(episode.steps) < limit
    out, score, obs, prev, earlier = [], 0.0, "", "", []
    for i, step in enumerate(steps):
        delta = rewards[i] - score
        value = 1.0 if delta > EPS else -1.0 if delta < -EPS else 0.0
        if ended and i == len(steps) - 1 and delta <= EPS:
            value = -1.0
        if not value and episode.won:
            # A step between rewards of a won episode counts for less the further it is from the next
            # reward: "open fridge" right before "take chicken wing" is part of the move, a detour of
            # a scripted random walk three steps earlier mostly is not.
            ahead = next((k for k in range(i + 1, len(steps)) if rewards[k] > rewards[k - 1] + EPS), None)
            value = WON_STEP * WON_DISCOUNT ** (ahead - i - 1) if ahead is not None else 0.0
        if value:
            state = (head, obs[:TEXT_CHARS], prev, " ".join(earlier[:-1]))
            out.append(Case(task_text(head), obs[:TEXT_CHARS], prev, step.action, value,
                            codes(step.action, state), memory(head, state[3])))
        score, obs, prev = rewards[i], step.observation or "", step.action
        earlier.append(obs)
    return out


def mine(episodes: list[Episode], benchmark=None) -> list[Case]:
    """Every case of the training episodes given (others are refused: dev and test stay unseen).
    ``benchmark``: where each task's first observation is read (an environment reset; the store keeps
    only what came after each action) and whose ``max_steps`` holds where a task sets no limit."""
    out, firsts = [], {}
    for ep in episodes:
        if ep.task.split != "train":
            raise ValueError(f"mining reads training episodes only; {ep.task.id} is from {ep.task.split!r}")
        if benchmark is not None and ep.task.id not in firsts:
            firsts[ep.task.id] = first_observation(benchmark, ep.task)
        limit = ep.task.max_steps or getattr(benchmark, "max_steps", None)
        out += episode_cases(ep, limit, firsts.get(ep.task.id, ""))
    return out


def first_observation(benchmark, task: Task) -> str:
    with closing(benchmark.env(task)) as env:
        return env.reset().text or ""


def merge(*groups: list[Case]) -> list[Case]:
    """Cases in order with exact repeats folded into one (the mean of their values)."""
    seen: dict[tuple, list[float]] = {}
    order: list[tuple] = []
    codes_of: dict[tuple, str] = {}
    for group in groups:
        for c in group:
            key = (c.task, c.obs, c.prev, c.action, c.memory)
            if key not in seen:
                seen[key], codes_of[key] = [], c.codes
                order.append(key)
            seen[key].append(c.value)
    return [Case(*k[:4], round(sum(seen[k]) / len(seen[k]), 3), codes_of[k], k[4]) for k in order
            if abs(sum(seen[k])) > EPS]


def encode(cases: list[Case]) -> dict:
    texts: dict[str, int] = {}

    def ix(text: str) -> int:
        return texts.setdefault(text, len(texts))
    rows = [[ix(c.task), ix(c.obs), ix(c.prev), ix(c.action), c.value, c.codes, ix(c.memory)] for c in cases]
    return {"version": 2, "texts": list(texts), "cases": rows}


def decode(data: dict) -> list[Case]:
    """The cases of :func:`encode`'s data (version 1, before cases held their memory, reads too)."""
    t = data["texts"]
    return [Case(t[r[0]], t[r[1]], t[r[2]], t[r[3]], float(r[4]), str(r[5]), t[r[6]] if len(r) > 6 else "")
            for r in data["cases"]]


def packed(cases: list[Case], limit: int = DATA_BYTES) -> tuple[bytes, list[Case]]:
    """The gzipped data of as many cases as fit ``limit`` bytes: the rewarded and penalised steps
    first, then the steps of won episodes, the latest of each kind first."""
    order = sorted(range(len(cases)), key=lambda i: (abs(cases[i].value) < 0.75, -i))
    keep = len(order)
    while True:
        chosen = sorted(order[:keep])
        blob = gzip.compress(json.dumps(encode([cases[i] for i in chosen])).encode(), mtime=0)
        if len(blob) <= limit or keep == 0:
            return blob, [cases[i] for i in chosen]
        keep = int(keep * min(0.95, limit / len(blob)))


def read_cases(skill_dir: Path) -> list[Case]:
    path = Path(skill_dir) / DATA_FILE
    if not path.is_file():
        return []
    with gzip.open(path, "rt") as fh:
        return decode(json.load(fh))


BODY = """Moves learnt from this agent's own experience, not written by anyone: the steps of earlier
training episodes that raised or lowered the score, and the steps of episodes that were won
({cases} cases from {episodes} episodes, {won} of them won).

Before each move the script finds the earlier states most like this one (the task, the latest
observation, the last action) and scores each valid action by what was done there. Its note says
"Next: ACTION." when a similar state rewarded a like move, and "Avoid: ..." for moves that lowered
the score. It says nothing when no earlier state is near enough: then decide from the task itself.

Run: `scripts/observe.py --actions JSON` with the episode so far on stdin."""


def write_mined_skill(root: Path, name: str, cases: list[Case], episodes: int, won: int) -> dict:
    """Write (or replace) the skill ``name`` under ``root`` (a program's ``skills/`` folder) holding
    ``cases``; returns what it holds (``cases``, ``dropped``: those that did not fit the caps)."""
    blob, kept = packed(cases)
    folder = Path(root) / name
    if folder.exists():
        shutil.rmtree(folder)
    meta = {"metadata": {"observe": "scripts/observe.py", "observe_actions": True,
                         "mined": {"cases": len(kept), "episodes": episodes, "won": won}}}
    Skills.write(Path(root), name,
                 "Moves mined from earlier episodes' rewards: says which valid action was rewarded in the "
                 "most similar earlier states, and which lowered the score.",
                 BODY.format(cases=len(kept), episodes=episodes, won=won), meta=meta,
                 scripts={"observe.py": OBSERVE.read_text()})
    (folder / DATA_FILE).write_bytes(blob)
    return {"cases": len(kept), "dropped": len(cases) - len(kept), "bytes": len(blob)}


def demonstrated(benchmark, tasks: list[Task]) -> list[Episode]:
    """The benchmark's demonstrations of training ``tasks`` played in their environments (no harness,
    no model: only what the environment says and scores), as episodes of model ``gold``."""
    from evolver import Demos

    offer = getattr(benchmark, "demonstration", None)
    out = []
    for task in tasks:
        actions = offer(task) if offer is not None else (list(task.gold) if Demos.has_gold(task) else None)
        if task.split == "train" and actions:
            moves = iter(actions)
            out.append(_played(benchmark, task, "gold", lambda obs, tried, _: next(moves, None), len(actions)))
    return out


def explored(benchmark, tasks: list[Task], seed: int = 0, guide: list[Case] | None = None,
             epsilon: float = 0.3, deadline: float | None = None) -> list[Episode]:
    """Training ``tasks`` played with rewards alone, no model, no demonstration, up to each task's step
    limit: each move a valid action at random (one not yet taken in the same observation while there
    is one) or, with ``guide`` (cases mined so far) and probability ``1 - epsilon``, the move their note
    names, so that later sweeps reach the rewards that only follow earlier ones. Where the environment
    lists no valid actions there is nothing to pick: no episode. ``deadline`` (a ``time.monotonic()``
    value): no task starts after it."""
    import random

    from evolver_experience.notes import observe

    rng = random.Random(seed)
    data = observe.loaded(encode(guide)) if guide else None

    def pick(obs, tried, transcript):
        fresh = _untried(obs, tried)
        if not fresh:
            return None
        if data is not None and rng.random() >= epsilon:
            named = _named(transcript, fresh, data)
            if named is not None:
                return named
        return rng.choice(fresh)
    eps = []
    for t in tasks:
        if deadline is not None and time.monotonic() >= deadline:
            break
        if t.split == "train":
            eps.append(_played(benchmark, t, "random" if data is None else "guided", pick, _limit(benchmark, t)))
    return [e for e in eps if e.steps]


def _untried(obs, tried: set) -> list[str]:
    """The valid actions not yet taken in this very observation, or all of them when every one was."""
    return [a for a in obs.actions or [] if (obs.text, a) not in tried] or list(obs.actions or [])


def _named(transcript: str, fresh: list[str], data) -> str | None:
    """The move of ``fresh`` the notes of ``data`` name for ``transcript`` (``Next: ACTION.``), if any."""
    from evolver_experience.notes import observe

    for line in observe.note(transcript, fresh, data).splitlines():
        if line.startswith("Next: ") and line[6:].rstrip(".") in fresh:
            return line[6:].rstrip(".")
    return None


def _limit(benchmark, task: Task) -> int:
    return task.max_steps or getattr(benchmark, "max_steps", None) or 20


def explored_sweeps(benchmark, tasks: list[Task], sweeps: int, seed: int = 0, guide: list[Case] | None = None,
                    epsilon: float = 0.3, deadline: float | None = None) -> list[Episode]:
    """``sweeps`` passes of :func:`explored` over ``tasks``, each guided by the cases of ``guide`` and of
    the sweeps before it (the first, without ``guide``, at random): what random play finds once, the
    next sweep repeats and goes past. ``deadline``: as :func:`explored`'s, for all the sweeps."""
    out: list[Episode] = []
    cases = list(guide or [])
    for k in range(max(1, sweeps)):
        got = explored(benchmark, tasks, seed=seed * 1000 + k, guide=cases or None, epsilon=epsilon,
                       deadline=deadline)
        out += got
        cases = merge(cases, mine(got, benchmark)) if k + 1 < sweeps else cases
    return out


def _played(benchmark, task: Task, model: str, choose, limit: int) -> Episode:
    """One episode of ``task`` whose actions ``choose(obs, tried, transcript)`` names (None ends it), at
    most ``limit``; the transcript is what an observer reads: the task, then each action and its answer."""
    from evolver import Step

    ep = Episode(task=task, program_id="", program_hash="", model=model, seed=0, purpose="mine")
    tried: set = set()
    with closing(benchmark.env(task)) as env:
        obs = env.reset()
        transcript = f"{task.prompt}\n\n{obs.text or ''}"
        while not obs.done and len(ep.steps) < limit:
            action = choose(obs, tried, transcript)
            if action is None:
                break
            tried.add((obs.text, action))
            obs = env.step(action)
            transcript += f"\n> {action}\n{obs.text or ''}"
            ep.steps.append(Step(index=len(ep.steps), prompt="", output=action, action=action,
                                 observation=obs.text, reward=obs.score))
        ep.score, ep.won = obs.score, bool((obs.info or {}).get("won", obs.score >= 1.0))
    return ep


def trial(benchmark, tasks: list[Task], cases: list[Case], seed: int = 0,
          habits: dict[str, int] | None = None, deadline: float | None = None) -> list[tuple[int, int] | None]:
    """How a harness that follows ``cases``' notes would play training ``tasks`` (no model: where the
    notes name no valid move, a valid one drawn by ``habits`` stands in for the model's, each weighted
    by 1 + how often the model chose it before, so a policy that always says "hit" keeps saying it):
    per task, (the moves the model would have been asked for, the moves), or None for a task whose
    environment lists no valid actions (a free-text reply: the model is asked every move, as the
    parent's would be). A choice of one, or a move the notes name, asks no model. ``deadline`` (a
    ``time.monotonic()`` value): no task starts after it."""
    import random

    from evolver_experience.notes import observe

    rng = random.Random(seed)
    data = observe.loaded(encode(cases)) if cases else None
    out: list[tuple[int, int] | None] = []
    for task in tasks:
        if deadline is not None and time.monotonic() >= deadline:
            break
        asked = [0]

        def pick(obs, tried, transcript):
            fresh = _untried(obs, tried)
            named = _named(transcript, fresh, data) if len(fresh) > 1 and data is not None else None
            if named is not None:
                return named
            if len(fresh) > 1:
                asked[0] += 1
            return rng.choices(fresh, [1 + (habits or {}).get(a, 0) for a in fresh])[0] if fresh else None
        ep = _played(benchmark, task, "trial", pick, _limit(benchmark, task))
        out.append((asked[0], len(ep.steps)) if ep.steps else None)
    return out
