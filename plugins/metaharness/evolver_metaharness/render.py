"""Single-call mode: a budgeted selection of the workspace, rendered into one prompt.

Always shown, whatever the budget: the harness interface, the source of the harness to copy, the answer
format. Then, while the token budget lasts, in this order:

  1. the evolution summary, newest proposals first;
  2. traces, in priority order: the worst failures of the best candidates (frontier members by dev score,
     a crash first), a few successes of the best one for contrast, then the last iteration's other
     candidates (how they failed is what the next proposal learns from);
  3. nothing else: every trace that was not shown is listed by its workspace path at the end, with the
     index file that lists them all, so the prompt never drops evidence silently.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from evolver import Harnesses, Traces

from evolver_metaharness.workspace import Export, TraceRef

FAILURES_PER_MEMBER = 4
SUCCESSES_OF_BEST = 2
FAILURES_PER_OTHER = 2
LISTED_PER_CANDIDATE = 12  # left-out file names listed per candidate before pointing at its index.tsv


@dataclass
class Rendered:
    text: str
    shown: list[str] = field(default_factory=list)  # trace paths in the prompt
    left_out: list[str] = field(default_factory=list)  # trace paths not in it
    summary_rows_left_out: int = 0


def rank_traces(export: Export, frontier, threshold: float, focus: int = 0) -> list[TraceRef]:
    """Traces in the order they deserve the prompt's room. ``focus`` rotates which failures lead, so the
    k candidates of one iteration look at different evidence."""
    by_cand: dict[str, list[TraceRef]] = {}
    for ref in export.traces:
        by_cand.setdefault(ref.candidate, []).append(ref)
    members = sorted(frontier.members, key=lambda m: -export.dev_scores.get(m.program_id, m.metrics.get("score", 0)))
    member_ids = [m.program_id for m in members]

    def failures(cid: str) -> list[TraceRef]:
        refs = [r for r in by_cand.get(cid, []) if r.episode.score < threshold or r.episode.error]
        return sorted(refs, key=lambda r: (r.episode.error is None, r.episode.score, r.path))

    def successes(cid: str) -> list[TraceRef]:
        refs = [r for r in by_cand.get(cid, []) if r.episode.score >= threshold and not r.episode.error]
        return sorted(refs, key=lambda r: (-r.episode.score, r.path))
    order: list[TraceRef] = []
    for rank, cid in enumerate(member_ids):
        fails = failures(cid)
        if fails and focus:
            k = focus % len(fails)
            fails = fails[k:] + fails[:k]
        order += fails[:FAILURES_PER_MEMBER if rank == 0 else FAILURES_PER_OTHER]
        if rank == 0:
            order += successes(cid)[:SUCCESSES_OF_BEST]
    latest = max((r["iteration"] for r in export.summary), default=None)
    recent = [r["candidate"] for r in export.summary if r["iteration"] == latest and r["candidate"] not in member_ids]
    for cid in recent:
        order += failures(cid)[:FAILURES_PER_OTHER]
    seen, unique = set(), []
    for r in order:
        if r.path not in seen:
            seen.add(r.path)
            unique.append(r)
    return unique


def render_trace(ref: TraceRef, episode=None, obs_chars: int = 160, context_chars: int = 700) -> str:
    """One trace, compactly: the context the model saw first, then each action and what came back."""
    e = episode or ref.episode
    lines = [f"### {ref.path}", f"candidate {ref.candidate}, {e.purpose} on {e.task.split} task {e.task.id} "
             f"({e.task.category}): score {e.score:.2f}{' won' if e.won else ''}, {e.prompt_tokens} context tokens"]
    if e.steps:
        lines.append("Context the model saw at step 0 (last message): " + _last_message(e.steps[0].prompt, context_chars))
    for s in e.steps:
        lines.append(Traces.step(s, obs_chars))
        if s.error:
            lines.append(f"    step error: {s.error.splitlines()[0][:200]}")
    if e.error:
        lines.append("Error:\n" + "\n".join(e.error.strip().splitlines()[-12:]))
    if e.task.gold is not None:
        gold = Traces.gold(e.task.gold)[:300]
        lines.append(f"Gold (for diagnosis only; a harness containing it is rejected): {gold}")
    return "\n".join(lines)


def _last_message(prompt: str, limit: int) -> str:
    try:
        msgs = json.loads(prompt)
        text = "\n".join(f"[{m.get('role')}] {m.get('content')}" for m in msgs) if isinstance(msgs, list) else prompt
    except (ValueError, TypeError, AttributeError):
        text = prompt
    return text if len(text) <= limit else text[:limit // 2] + " [...] " + text[-limit // 2:]


def summary_line(r: dict) -> str:
    score = f"probe {r['probe_score']:.3f}" if r["probe_score"] is not None else (
        f"dev {r['dev_score']:.3f}" if isinstance(r["dev_score"], (int, float)) else "not evaluated")
    delta = f" ({r['delta']:+.3f} vs parent)" if r["delta"] is not None else ""
    return (f"- {r['candidate']} (iteration {r['iteration']}, {r['proposer']}, from {r['parent']}) "
            f"[{r['mechanism'] or r.get('operator', '')}] {r['hypothesis'][:160]} -> {r['status']}, {score}{delta}"
            + (f"; {r['reason'][:120]}" if r["reason"] else ""))


def render(export: Export, parent_id: str, parent_code: str, frontier, threshold: float, budget: int,
           count_tokens, answer_format: str, load=None, focus: int = 0, note: str = "") -> Rendered:
    """The prompt for one candidate. ``load(ids)`` returns those episodes with their steps (the export
    holds them without); ``budget`` is in tokens as ``count_tokens`` counts them."""
    head = ("## The harness interface\n" + Harnesses.INTERFACE.strip() +
            f"\n\n## The harness to copy: candidates/{parent_id}/harness/harness.py\n```python\n{parent_code}```\n")
    tail = "\n" + (note + "\n\n" if note else "") + answer_format
    used = count_tokens(head) + count_tokens(tail)
    sections: list[str] = []
    rows = list(reversed(export.summary))
    kept_rows = []
    for r in rows:
        line = summary_line(r)
        cost = count_tokens(line)
        if used + cost > budget * 0.4 + count_tokens(head):  # the summary may take at most 40% of the budget
            break
        kept_rows.append(line)
        used += cost
    sections.append("## Evolution summary (newest first; all of it is in summary.md)\n" +
                    ("\n".join(kept_rows) if kept_rows else "(no proposals yet: this is the first iteration)"))
    shown: list[str] = []
    ranked = rank_traces(export, frontier, threshold, focus)
    full = {e.id: e for e in load([r.episode.id for r in ranked])} if load and ranked else {}
    for ref in ranked:
        block = render_trace(ref, full.get(ref.episode.id))
        cost = count_tokens(block)
        if used + cost > budget:
            continue
        sections.append(block)
        shown.append(ref.path)
        used += cost
    left = [r.path for r in export.traces if r.path not in shown]
    out = Rendered("", shown, left, len(rows) - len(kept_rows))
    sections.insert(1, f"## Traces ({len(shown)} of {len(export.traces)} shown)")
    sections.append(left_out_text(out))
    out.text = head + "\n" + "\n\n".join(sections) + "\n" + tail
    return out


def left_out_text(r: Rendered) -> str:
    if not r.left_out and not r.summary_rows_left_out:
        return "Nothing was left out."
    lines = ["## Left out to fit the budget"]
    if r.summary_rows_left_out:
        lines.append(f"- {r.summary_rows_left_out} older rows of the evolution summary (summary.md)")
    by_folder: dict[str, list[str]] = {}
    for path in r.left_out:
        folder, _, name = path.rpartition("/")
        by_folder.setdefault(folder, []).append(name)
    for folder, names in by_folder.items():
        listed = ", ".join(names[:LISTED_PER_CANDIDATE])
        more = f" and {len(names) - LISTED_PER_CANDIDATE} more" if len(names) > LISTED_PER_CANDIDATE else ""
        lines.append(f"- {len(names)} traces in {folder}/: {listed}{more} (all listed in {folder}/index.tsv)")
    return "\n".join(lines)
