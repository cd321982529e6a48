"""Recursive evolution: weak categories -> failed TRAINING trajectories -> lessons -> dedup -> the bank.

After a validation, each category whose score is below ``category_threshold`` gets new lessons
distilled from its failed training trajectories (never validation ones: :func:`training_failures`
filters and the distiller refuses anything else). New entries too close to the bank or to each other
are dropped (:func:`dedup`). Whether the grown bank stays is decided by the next validation: the
frontier in ``evolver run``, the trainer's not-worse check in ``evolver train --skillrl``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from evolver import Episode, Skill, cosine
from evolver_skillrl.bank import BankEntry, counts
from evolver_skillrl.distill import TRAINING_PURPOSES, Distiller, Item
from evolver_skillrl.retrieval import skill_text

#: A general principle every bank starts with when its teacher writes none (origin: builtin).
GENERAL_SEED = BankEntry(
    "general", "general-act-on-the-goal", "Use when acting in any task: keep the goal in view and act only "
    "through valid actions.",
    "1. Read the task description first: it names the goal and the objects that matter.\n"
    "2. Choose only actions the environment lists as valid.\n"
    "3. Do not repeat an action that changed nothing; try the next step toward the goal.\n"
    "4. After each action, check the observation: did it bring the goal closer?", origin="builtin")


@dataclass
class Evolution:
    entries: list[BankEntry] = field(default_factory=list)
    weak: list[str] = field(default_factory=list)
    used: list[Episode] = field(default_factory=list)  # the trajectories distilled
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (name, why)
    stats: dict = field(default_factory=dict)


def weak_categories(per_category: dict[str, float], threshold: float) -> list[str]:
    return sorted(c for c, score in per_category.items() if score < threshold)


def training_failures(episodes: list[Episode], categories: list[str], failure_threshold: float,
                      per_category: int) -> list[Episode]:
    """Failed training episodes of ``categories``, at most ``per_category`` each, lowest score first;
    anything played on dev or test, or not as training, is left out here."""
    out: list[Episode] = []
    for cat in categories:
        mine = [e for e in episodes if e.task.category == cat and e.task.split == "train"
                and e.purpose in TRAINING_PURPOSES and e.purpose != "gold" and e.score < failure_threshold]
        seen, picked = set(), []
        for e in sorted(mine, key=lambda e: (e.score, e.task.id)):
            if e.task.id not in seen:  # one lesson source per task: variety over repetition
                seen.add(e.task.id)
                picked.append(e)
        out += picked[:per_category]
    return out


def _scope(category: str | None) -> str:
    return category or "(general)"


def dedup(entries: list[BankEntry], bank: list[Skill], embedder, threshold: float) -> tuple[list[BankEntry], list]:
    """Drop entries whose text is as close as ``threshold`` (cosine) to a bank skill or to an entry kept
    before them, within one scope (a category's skills and lessons; the general tier): two categories
    may well share wording without one making the other redundant. Returns (kept, [(name, why)])."""
    if not entries:
        return [], []
    old = embedder.encode([skill_text(s) for s in bank]) if bank else np.zeros((0, 1), dtype=np.float32)
    old_scope = [_scope(s.meta.get("category")) for s in bank]
    new = embedder.encode([e.text for e in entries])
    kept, kept_vecs, dropped = [], [], []
    for e, v in zip(entries, new):
        mine = [j for j, sc in enumerate(old_scope) if sc == _scope(e.category)]
        sims = cosine(v[None, :], old[mine])[0] if mine else np.zeros(0)
        if len(sims) and float(sims.max()) >= threshold:
            j = mine[int(sims.argmax())]
            dropped.append((e.name, f"near-duplicate of bank skill {bank[j].name} (cosine {float(sims.max()):.3f})"))
            continue
        inner = [(float(v @ k), i) for i, k in enumerate(kept_vecs) if _scope(kept[i].category) == _scope(e.category)]
        if inner and max(inner)[0] >= threshold:
            sim, i = max(inner)
            dropped.append((e.name, f"near-duplicate of new entry {kept[i].name} (cosine {sim:.3f})"))
            continue
        kept.append(e)
        kept_vecs.append(v)
    return kept, dropped


def cap(entries: list[BankEntry], bank: list[Skill], per_category: int, max_bank: int) -> tuple[list, list]:
    kept, dropped, per = [], [], {}
    room = max(0, max_bank - len(bank))
    for e in entries:
        key = e.category or "general"
        if per.get(key, 0) >= per_category:
            dropped.append((e.name, f"already {per_category} new entries for {key}"))
        elif len(kept) >= room:
            dropped.append((e.name, f"the bank is full ({max_bank} skills)"))
        else:
            per[key] = per.get(key, 0) + 1
            kept.append(e)
    return kept, dropped


def evolve(per_category: dict[str, float], episodes: list[Episode], bank: list[Skill], distiller: Distiller,
           embedder, options, failure_threshold: float) -> Evolution:
    """New lessons for the weak categories, from failed training trajectories, deduplicated and capped."""
    out = Evolution(weak=weak_categories(per_category, options.category_threshold))
    out.used = training_failures(episodes, out.weak, failure_threshold, options.failures_per_category)
    items = [Item("lesson", e, list(e.task.gold) if isinstance(e.task.gold, list) else None) for e in out.used]
    result = distiller.distill(items)
    kept, dropped = dedup(result.entries, bank, embedder, options.dedup_threshold)
    kept, capped = cap(kept, bank, options.new_per_category, options.max_bank)
    out.entries, out.dropped = kept, dropped + capped
    out.stats = {"weak": out.weak, "failures": len(out.used), **result.stats, "deduplicated": len(dropped),
                 "capped": len(capped), "added": len(kept), "problems": result.problems[:5],
                 "bank_before": counts(bank)}
    return out


def seed_entries(gold_episodes: list[Episode], bank: list[Skill], distiller: Distiller, embedder, options,
                 with_general: bool = True) -> Evolution:
    """Skills distilled from successful gold trajectories (plus the builtin general principle when the
    bank has no general skill and the teacher wrote none)."""
    out = Evolution(used=[e for e in gold_episodes if e.won and not e.error])
    result = distiller.distill([Item("skill", e) for e in out.used])
    entries = list(result.entries)
    if with_general and not any(e.tier == "general" for e in entries) and not counts(bank)["general"]:
        entries.insert(0, GENERAL_SEED)
    kept, dropped = dedup(entries, bank, embedder, options.dedup_threshold)
    kept, capped = cap(kept, bank, max(1, options.new_per_category), options.max_bank)
    out.entries, out.dropped = kept, dropped + capped
    out.stats = {"gold": len(out.used), **result.stats, "deduplicated": len(dropped), "capped": len(capped),
                 "added": len(kept), "problems": result.problems[:5], "bank_before": counts(bank)}
    return out
