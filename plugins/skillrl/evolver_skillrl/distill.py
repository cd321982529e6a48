"""Distillation: trajectories in, bank entries out.

A teacher (any role's backend; the policy, i.e. the executor, by default) reads one trajectory and
answers one JSON object: a successful trajectory becomes a skill, a failed one a lesson (where it
failed, the wrong action, the right action, the general rule). Every answer is schema-checked
(:mod:`evolver_skillrl.schema`); an invalid one gets ONE repair call that shows the teacher its answer and
the problems; still invalid, it is dropped and counted. All first answers go out as one batch, then all
repairs as one batch.

``teacher = "rules"`` is a deterministic distiller with no model call: a skill is the trajectory's
action pattern with the objects abstracted away; a lesson names the first step where the failed
trajectory left the reference path. It is what a 135M policy can be seeded with.

Only training trajectories may be distilled: :func:`check_training` raises for anything else, so a
validation or test episode can never shape the bank (SKILLRL's reference code evolved from validation
failures, which leaks).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from evolver import Episode, EvolverError, GenRequest, Message
from evolver_skillrl import schema
from evolver_skillrl.bank import BankEntry, lesson_body

#: Episode purposes that are played on training tasks (loop rollouts, GRPO rollouts, gold replays).
TRAINING_PURPOSES = ("train", "grpo", "gold", "skillrl")

SYSTEM = ("You turn an agent's experience into short reusable skills for future tasks of the same kind. "
          "Write general procedures and rules: never copy this task's exact object names or its full "
          "solution. Answer with ONE JSON object and nothing else.")


class LeakError(EvolverError):
    """A non-training trajectory was about to be distilled."""


def check_training(episodes: list[Episode]) -> None:
    for e in episodes:
        if e.task.split != "train" or e.purpose not in TRAINING_PURPOSES:
            raise LeakError(f"episode {e.id or '?'} of task {e.task.id} (split {e.task.split!r}, purpose "
                            f"{e.purpose!r}) cannot be distilled: only training trajectories (split 'train', "
                            f"purpose in {TRAINING_PURPOSES}) may shape the skill bank")


@dataclass
class Item:
    kind: str  # "skill" (from a success) | "lesson" (from a failure)
    episode: Episode
    reference: list[str] | None = None  # a correct action path, for diagnosis only (never copied)


@dataclass
class Distilled:
    entries: list[BankEntry] = field(default_factory=list)
    stats: dict = field(default_factory=lambda: {"asked": 0, "valid": 0, "repaired": 0, "rejected": 0})
    problems: list[str] = field(default_factory=list)


def render_trajectory(ep: Episode, max_steps: int = 20) -> str:
    lines = []
    for i, s in enumerate([s for s in ep.steps if not s.tool_calls][:max_steps], 1):
        obs = " ".join((s.observation or "").split())[:200]
        lines.append(f"{i}. > {s.action or '(no action)'}\n   {obs}")
    return "\n".join(lines) or "(no steps)"


def task_text(ep: Episode) -> str:
    return (ep.task.meta.get("description") or ep.task.prompt or "").strip()[:600]


def request_for(item: Item, max_steps: int) -> list[Message]:
    ep = item.episode
    head = (f"Task category: {ep.task.category}\nTask: {task_text(ep)}\n\n"
            f"Trajectory (final score {ep.score:.2f}{', won' if ep.won else ''}):\n{render_trajectory(ep, max_steps)}")
    if item.kind == "skill":
        ask = ("This trajectory succeeded. Write ONE reusable skill for tasks of this category: the general "
               "procedure that made it work. Set \"general\" to true only if it helps in every kind of task.\n"
               f"Answer format:\n{schema.SKILL_FORMAT}")
    else:
        ref = ""
        if item.reference:
            ref = ("\n\nA correct action path for this task (for diagnosis only; do not copy it):\n"
                   + ", ".join(item.reference[:max_steps]))
        ask = (f"This trajectory failed.{ref}\n\nWrite ONE failure lesson: where it failed, the wrong action, the "
               f"right action, and the general rule that avoids this mistake in other tasks of this category.\n"
               f"Answer format:\n{schema.LESSON_FORMAT}")
    return [Message("system", SYSTEM), Message("user", f"{head}\n\n{ask}")]


def to_entry(item: Item, answer) -> BankEntry:
    ep = item.episode
    if item.kind == "skill":
        body = "\n".join(f"{i}. {s}" for i, s in enumerate(answer.steps, 1))
        tier = "general" if answer.general else "task"
        return BankEntry(tier, answer.name, answer.description, body, None if tier == "general" else ep.task.category,
                         origin="gold" if ep.purpose == "gold" else "success", sources=[ep.id] if ep.id else [])
    return BankEntry("lesson", answer.name, answer.description,
                     lesson_body(answer.where, answer.wrong_action, answer.right_action, answer.rule),
                     ep.task.category, origin="failure", sources=[ep.id] if ep.id else [])


class Distiller:
    """``teacher``: a backend, or None for the rules distiller."""

    def __init__(self, teacher=None, max_tokens: int = 300, repair: bool = True, max_steps: int = 20):
        self.teacher, self.max_tokens, self.repair, self.max_steps = teacher, max_tokens, repair, max_steps

    def distill(self, items: list[Item]) -> Distilled:
        check_training([it.episode for it in items])
        out = Distilled()
        out.stats["asked"] = len(items)
        if not items:
            return out
        if self.teacher is None:
            for it in items:
                entry = rules_entry(it)
                if entry is None:
                    out.stats["rejected"] += 1
                else:
                    out.entries.append(entry)
                    out.stats["valid"] += 1
            return out
        models = [schema.SkillAnswer if it.kind == "skill" else schema.LessonAnswer for it in items]
        msgs = [request_for(it, self.max_steps) for it in items]
        first = self.teacher.generate([GenRequest(m, max_tokens=self.max_tokens) for m in msgs])
        answers, retry = [None] * len(items), []
        for i, res in enumerate(first):
            answers[i], problems = schema.parse(res.text if not res.error else "", models[i])
            if answers[i] is None:
                retry.append((i, res.text or "", problems if not res.error else [f"teacher error: {res.error}"]))
        if retry and self.repair:
            reqs = [GenRequest(msgs[i] + [Message("assistant", text[:1500]), Message(
                "user", "That answer is not valid: " + "; ".join(problems[:6]) +
                ". Answer again with only the corrected JSON object.")], max_tokens=self.max_tokens)
                for i, text, problems in retry]
            for (i, _, _), res in zip(retry, self.teacher.generate(reqs)):
                answers[i], problems = schema.parse(res.text if not res.error else "", models[i])
                problems = [f"teacher error: {res.error}"] if res.error else problems
                if answers[i] is not None:
                    out.stats["repaired"] += 1
                else:
                    out.problems.append(f"{items[i].episode.task.category}: {'; '.join(problems[:3])}")
        elif retry:
            out.problems += [f"{items[i].episode.task.category}: {'; '.join(p[:3])}" for i, _, p in retry]
        for it, ans in zip(items, answers):
            if ans is None:
                out.stats["rejected"] += 1
            else:
                out.entries.append(to_entry(it, ans))
                out.stats["valid"] += 1
        return out


# --- the rules distiller --------------------------------------------------------------------------

_KEEP = {"in", "into", "on", "onto", "from", "to", "with", "at", "the", "a", "an", "around", "north", "south",
         "east", "west", "up", "down", "and"}


def abstract(action: str) -> str:
    """'cook red potato in stove' -> 'cook X in Y': the verb and prepositions stay, objects become slots."""
    words = action.lower().split()
    if not words:
        return ""
    out, slots = [words[0]], iter("XYZW")
    run = False
    for w in words[1:]:
        if w in _KEEP:
            if w not in ("the", "a", "an"):
                out.append(w)
            run = False
        elif not run:
            out.append(next(slots, "V"))
            run = True
    return " ".join(out)


def rules_entry(item: Item) -> BankEntry | None:
    ep = item.episode
    actions = [s.action for s in ep.steps if s.action and not s.tool_calls]
    cat = ep.task.category
    if item.kind == "skill":
        pattern: list[str] = []
        for a in actions:
            p = abstract(a)
            if p and (not pattern or pattern[-1].split(" (")[0] != p):
                pattern.append(p)
            elif p:
                pattern[-1] = f"{p} (repeat as needed)"
        if not pattern:
            return None
        verbs = [v for v, _ in Counter(p.split()[0] for p in pattern).most_common(4)]
        body = ("Actions that solved a task of this kind, in order (X, Y: the objects the task names):\n"
                + "\n".join(f"{i}. {p}" for i, p in enumerate(pattern[:12], 1)))
        return BankEntry("task", f"{cat}-procedure", f"Use when solving a {cat} task: the usual order of "
                         f"actions ({', '.join(verbs)}).", body, cat,
                         origin="gold" if ep.purpose == "gold" else "rules", sources=[ep.id] if ep.id else [])
    ref = item.reference or []
    for i, a in enumerate(actions):
        if i < len(ref) and a.strip().lower() != ref[i].strip().lower():
            obs = " ".join((ep.steps[i].observation or "").split())[:120] if i < len(ep.steps) else ""
            where = f"step {i + 1} of a {cat} task" + (f" (the game answered: {obs})" if obs else "")
            rule = (f"In {cat}, before '{abstract(a).split()[0]}', check whether '{abstract(ref[i])}' is what the "
                    f"task needs now.")
            return BankEntry("lesson", f"{cat}-{slug_verb(ref[i])}-before-{slug_verb(a)}",
                             f"Use when a {cat} task offers both '{abstract(ref[i])}' and '{abstract(a)}'.",
                             lesson_body(where, a, ref[i], rule), cat, origin="rules",
                             sources=[ep.id] if ep.id else [])
    return None


def slug_verb(action: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", abstract(action).split()[0] if action.strip() else "act").strip("-") or "act"
