"""The run report: baseline vs best on test, the frontier table, each admitted program's diff,
tokens used. Written as Markdown (for people) and JSON (for scripts) under ``store/reports/``."""
from __future__ import annotations

import json
from pathlib import Path


def normalised_gain(p_skill: float, p_none: float) -> float | None:
    """SkillsBench's g = (P_skill - P_none) / (1 - P_none); None when the baseline is perfect."""
    return None if p_none >= 1.0 else (p_skill - p_none) / (1.0 - p_none)


def render(run, summary: dict) -> str:
    test = summary["test"]
    base, best = summary["baseline"], summary["best"]
    b, t = test.get(base, {}), test.get(best, {})
    lines = [f"# evolver run {run.id}", "",
             f"Benchmark `{run.config.benchmark}` {json.dumps(run.config.benchmark_options)}; "
             f"{summary['iterations']} iterations; {summary['wall_s']:.0f} s wall.", "",
             "## Test split (never seen by selection)", "",
             "| program | score | success | context tokens/episode | tokens/episode |",
             "|---|---|---|---|---|"]
    for pid, m in test.items():
        tag = " (baseline)" if pid == base else (" (best on dev)" if pid == best else "")
        lines.append(f"| {pid}{tag} | {m['score']:.3f} | {m['success']:.3f} | {m['context_tokens']:.0f} | {m['cost']:.0f} |")
    if b and t:
        g = normalised_gain(t["score"], b["score"])
        lines += ["", f"Best vs baseline on test: {t['score'] - b['score']:+.3f} absolute"
                  + (f", normalised gain g = {g:+.3f}" if g is not None else "") + "."]
    # Context tokens per episode are shown even when they are not an objective: they are what a harness costs.
    columns = [o.split(":")[0] for o in summary["frontier"]["objectives"]]
    columns += [c for c in ("score", "context_tokens") if c not in columns]
    lines += ["", "## Frontier (dev)", "", f"Objectives: {', '.join(summary['frontier']['objectives'])}.", "",
              "| program | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for m in summary["frontier"]["members"]:
        vals = [f"{m['metrics'][c]:.3f}" if c in m["metrics"] else "" for c in columns]
        lines.append(f"| {m['program_id']} | " + " | ".join(vals) + " |")
    rows = run.store.proposals(run.id)
    lines += ["", "## Candidates", "", f"{len(rows)} proposed, "
              f"{sum(r['status'] in ('admitted', 'discarded') for r in rows)} valid (evaluated), "
              f"{sum(r['status'] == 'admitted' for r in rows)} admitted.", "",
              "| id | proposer | operator | parent | status | dev score | reason |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        score = (r.get("scores") or {}).get("score")
        reason = (r.get("reason") or "").splitlines()[0][:80] if r.get("reason") else ""
        lines.append(f"| {r['candidate_id']} | {r['proposer']} | {r['operator']} | {r['parent_id']} | {r['status']} | "
                     f"{'' if score is None else f'{score:.3f}'} | {reason} |")
    lines += ["", "## Tokens", ""] + [f"- {role}: {n}" for role, n in sorted(summary["tokens"].items())]
    for r in rows:
        if r["status"] == "admitted":
            diff = run.repo.diff(r["parent_id"], r["candidate_id"])
            mechanism = (r.get("detail") or {}).get("mechanism")
            lines += ["", f"## Diff of {r['candidate_id']} ({r['operator']}: {r['hypothesis'][:80]})", ""]
            lines += [f"Mechanism: {mechanism}", ""] if mechanism else []
            lines += ["```diff", diff.strip()[:6000], "```"]
    return "\n".join(lines) + "\n"


def write_report(run, summary: dict) -> Path:
    out = Path(run.config.store) / "reports"
    out.mkdir(parents=True, exist_ok=True)
    md = out / f"{run.id}.md"
    md.write_text(render(run, summary))
    (out / f"{run.id}.json").write_text(json.dumps(summary, indent=2, default=str))
    return md
