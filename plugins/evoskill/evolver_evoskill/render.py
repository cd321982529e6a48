"""Rendering the proposer's evidence: failure traces, contrasting successes, skills, history H.

Long inputs are cut by a documented ladder, never silently. Each rung is tried in order until the
prompt fits the token budget; the prompt then ends with a line naming every cut that was made:

  0. everything: up to 4 failures and 2 successes, every step, observations up to 300 characters,
     the whole history;
  1. observations cut to 120 characters;
  2. only the last 6 steps of each trace;
  3. one success instead of two;
  4. the last 5 history entries only;
  5. two failures instead of four;
  6. only the last 3 steps of each trace;
  7. (last resort) the rendered text is cut in the middle with a visible "[... N characters cut ...]".
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from evolver import Episode, Traces


@dataclass(frozen=True)
class Rung:
    failures: int = 4
    successes: int = 2
    steps: int | None = None
    obs_chars: int = 300
    history: int | None = None
    note: str = ""


LADDER = [
    Rung(),
    Rung(obs_chars=120, note="observations cut to 120 characters"),
    Rung(obs_chars=120, steps=6, note="only the last 6 steps of each trace"),
    Rung(obs_chars=120, steps=6, successes=1, note="one success shown"),
    Rung(obs_chars=120, steps=6, successes=1, history=5, note="only the last 5 history entries"),
    Rung(obs_chars=120, steps=6, successes=1, history=5, failures=2, note="two failures shown"),
    Rung(obs_chars=120, steps=3, successes=1, history=5, failures=2, note="only the last 3 steps of each trace"),
]


def render_trace(ep: Episode, rung: Rung, show_gold: bool = True) -> str:
    steps = [s for s in ep.steps]
    hidden = 0
    if rung.steps is not None and len(steps) > rung.steps:
        hidden = len(steps) - rung.steps
        steps = steps[-rung.steps:]
    lines = [f"Category: {ep.task.category}   score: {ep.score:.2f}{'   (won)' if ep.won else ''}",
             f"Task: {ep.task.prompt.strip()[:rung.obs_chars * 2]}"]
    if hidden:
        lines.append(f"({hidden} earlier steps not shown)")
    lines += [Traces.step(s, rung.obs_chars) for s in steps]
    if ep.error:
        lines.append(f"Error: {ep.error.splitlines()[0][:200]}")
    lines.append(f"Predicted (last action): {ep.prediction or '(none)'}")
    if show_gold and ep.task.gold is not None:
        gold = Traces.gold(ep.task.gold)[:rung.obs_chars]
        lines.append(f"Gold (for diagnosis only, never copy it into a skill): {gold}")
    return "\n".join(lines)


def render_history(history: list[dict], rung: Rung) -> str:
    rows = history if rung.history is None else history[-rung.history:]
    if not rows:
        return "(no earlier proposals)"
    out = []
    for r in rows:
        score = (r.get("scores") or {}).get("score")
        score_text = f"dev score {score:.3f}" if isinstance(score, (int, float)) else "not evaluated"
        out.append(f"- {r['operator']} {(r.get('detail') or {}).get('skill', '')}: {r.get('hypothesis', '')[:120]} "
                   f"-> {r['status']} ({score_text}{'; ' + r['reason'].splitlines()[0][:80] if r.get('reason') else ''})")
    return "\n".join(out)


def render_skills(skills) -> str:
    if not skills:
        return "(none yet)"
    return "\n".join(f"- {s.name}: {s.description}\n  {s.body.strip()[:300]}" for s in skills)


def fit(build, budget_tokens: int, count_tokens) -> tuple[str, list[str]]:
    """Render with each rung in turn until ``count_tokens(text) <= budget``; return text and the cuts."""
    cuts: list[str] = []
    text = ""
    for rung in LADDER:
        if rung.note:
            cuts.append(rung.note)
        text = build(rung)
        if count_tokens(text) <= budget_tokens:
            return text, cuts
    # Last resort: cut the middle, visibly.
    keep = max(200, int(len(text) * budget_tokens / max(1, count_tokens(text))))
    cut = len(text) - keep
    text = text[: keep // 2] + f"\n[... {cut} characters cut ...]\n" + text[-keep // 2:]
    cuts.append(f"{cut} characters cut from the middle")
    return text, cuts


def with_cuts(text: str, cuts: list[str]) -> str:
    return text + ("\n\nLeft out to fit the context: " + "; ".join(cuts) + "." if cuts else "")


def rung_with(rung: Rung, **kw) -> Rung:
    return replace(rung, **kw)
