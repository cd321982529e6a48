"""SKILLRL retrieval: S_g ∪ TopK({s ∈ S_k : sim(e_d, e_s) > δ}, K), within a token budget.

General skills are always returned first. Task-specific skills and lessons of the task's category
(``same_category``; all categories otherwise, or when the bank has none for it) are ranked by the
cosine between the task description and the skill's description + body; those above δ are taken
best first while their bodies fit the token budget, at most K. The caller's ``k`` (the harness's
room for bodies) caps the total: general skills take their share first.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from evolver import Skill, cosine
from evolver_skillrl.bank import tier_of


@dataclass
class Retrieved:
    skills: list[Skill]
    scores: dict[str, float] = field(default_factory=dict)  # name -> similarity of the task-specific ones
    skipped: dict[str, str] = field(default_factory=dict)  # name -> why it was left out


def query_text(task) -> str:
    return f"{task.category}: {task.prompt}"


def skill_text(skill: Skill) -> str:
    return f"{skill.description}\n{skill.body}"


class Retriever:
    def __init__(self, skills: list[Skill], embedder, top_k: int = 2, delta: float = 0.25, token_budget: int = 400,
                 same_category: bool = True, count_tokens=None):
        self.general = [s for s in skills if tier_of(s) == "general"]
        self.specific = [s for s in skills if tier_of(s) in ("task", "lesson")]
        self.embedder, self.top_k, self.delta = embedder, top_k, delta
        self.token_budget, self.same_category = token_budget, same_category
        self.count_tokens = count_tokens or (lambda text: max(1, len(text) // 4))
        self.vectors = embedder.encode([skill_text(s) for s in self.specific])

    def retrieve(self, task, k: int | None = None) -> Retrieved:
        room = len(self.general) + self.top_k if k is None else k
        out = Retrieved(list(self.general[:room]))
        room_left = min(self.top_k, room - len(out.skills))
        pool = list(range(len(self.specific)))
        if self.same_category:
            mine = [i for i in pool if self.specific[i].meta.get("category") == task.category]
            pool = mine or pool  # a category the bank has not met yet: the nearest of any category
        if not pool or room_left <= 0:
            return out
        sims = cosine(self.embedder.encode([query_text(task)]), self.vectors[pool])[0]
        used = 0
        for j in sorted(range(len(pool)), key=lambda j: (-float(sims[j]), self.specific[pool[j]].name)):
            skill, sim = self.specific[pool[j]], float(sims[j])
            if sim <= self.delta:
                out.skipped[skill.name] = f"similarity {sim:.3f} <= delta {self.delta}"
                continue
            if len(out.skills) - len(self.general) >= room_left:
                out.skipped[skill.name] = "top-K full"
                continue
            cost = self.count_tokens(skill.render_full())
            if used + cost > self.token_budget:
                out.skipped[skill.name] = f"over the token budget ({used} + {cost} > {self.token_budget})"
                continue
            used += cost
            out.skills.append(skill)
            out.scores[skill.name] = sim
        return out
