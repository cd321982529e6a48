"""The proposer's workspace: the whole search history as files, refreshed before each proposal.

Meta-Harness's finding is that a proposer which reads raw traces finds far better harnesses than one that
sees scores or summaries (median 50.0 vs 34.6 in the paper's ablation). So everything the run knows about
every candidate is laid out where a coding agent can LIST, READ and GREP it::

    <store>/metaharness/<run id>/
      README.md                   what is here, and the harness interface (evolver.harness's docstring)
      summary.md                  the evolution summary: candidate, parent, mechanism, hypothesis, outcome, delta
      frontier.md                 the current frontier with its metrics
      candidates/<id>/
        harness/...               the candidate's harness source, every file
        prompt.md, skills.md      the rest of the program (skills by name and description)
        diff.patch                what it changed against its parent (empty for the seed)
        proposal.md               who proposed it, hypothesis, mechanism, status and the full reason
                                  (a crash's traceback included)
        scores.md                 per split and purpose (train rollouts, smoke, dev), per task category
        traces/index.tsv          one line per episode: file, split, purpose, category, task, score, error
        traces/*.txt              each episode's raw trace from the trace store: every step's context,
                                  output, action, observation, tokens, errors, and the gold answer

The test split is never exported: selection and proposers never see it. Files of a candidate that cannot
change (source, diff, traces already written) are written once; summaries are rewritten every time.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from evolver import Episode, Harnesses, Traces


@dataclass
class TraceRef:
    """One exported trace: where it is and what a renderer needs to rank it."""

    path: str  # relative to the workspace
    candidate: str
    episode: Episode


@dataclass
class Export:
    root: Path
    candidates: list[str] = field(default_factory=list)  # program ids, oldest first
    traces: list[TraceRef] = field(default_factory=list)
    summary: list[dict] = field(default_factory=list)  # the evolution summary's rows
    dev_scores: dict[str, float] = field(default_factory=dict)  # program id -> last full dev score
    forbidden: list[str] = field(default_factory=list)  # task ids and gold answers shown here
    forbidden_sequences: list[list[str]] = field(default_factory=list)  # gold action sequences shown here


def workspace_root(run, option: str | None = None) -> Path:
    return Path(option) if option else Path(run.config.store) / "metaharness" / run.id


def export(run, root: Path) -> Export:
    """Write (or refresh) the workspace for ``run`` under ``root`` and return what is in it."""
    root.mkdir(parents=True, exist_ok=True)
    out = Export(root)
    store, repo = run.store, run.repo
    programs = store.programs(run.id)
    out.dev_scores = {}
    for row in store.evaluations(run.id, split="dev"):
        out.dev_scores[row["program_id"]] = row["score"]
    proposals = {p["candidate_id"]: p for p in store.proposals(run.id)}
    tasks_seen: dict[str, object] = {}
    for prog in programs:
        pid = prog["program_id"]
        folder = root / "candidates" / pid
        out.candidates.append(pid)
        if not (folder / "diff.patch").exists():
            _write_source(repo, folder, pid, prog.get("parent_id") or "")
        _write(folder / "proposal.md", _proposal_text(prog, proposals.get(pid)))
        episodes = _episodes(store, run.id, prog)
        evaluations = [ev for ev in store.evaluations(run.id, program_id=pid) if ev["split"] != "test"]
        _write(folder / "scores.md", _scores_text(pid, episodes, evaluations))
        out.traces += _write_traces(store, folder, pid, episodes, root)
        for e in episodes:
            tasks_seen[e.task.id] = e.task.gold
    committed = {prog["program_id"] for prog in programs}
    for cid, proposal in proposals.items():  # rejected before a commit: no source, but the answer and why
        if cid not in committed:
            _write(root / "candidates" / cid / "proposal.md", _proposal_text({"program_id": cid}, proposal))
    out.summary = summary_rows(proposals.values(), out.dev_scores)
    _write(root / "summary.md", _summary_text(out.summary))
    _write(root / "frontier.md", _frontier_text(run.frontier))
    _write(root / "README.md", _readme())
    for task_id, gold in tasks_seen.items():
        out.forbidden.append(task_id)
        if isinstance(gold, (list, tuple)):
            out.forbidden_sequences.append([str(g) for g in gold])
        elif gold is not None:
            out.forbidden.append(str(gold))
    return out


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _write_source(repo, folder: Path, pid: str, parent: str) -> None:
    files = repo.files(pid)
    for rel, text in files.items():
        if rel.startswith("harness/") or rel == "prompt.md":
            _write(folder / rel, text)
    skills = [f"- {rel.split('/')[1]}: " + _description(text) for rel, text in files.items()
              if rel.startswith("skills/") and rel.endswith("/SKILL.md")]
    _write(folder / "skills.md", "\n".join(skills) + "\n" if skills else "(no skills)\n")
    _write(folder / "diff.patch", repo.diff(parent, pid) if parent else "")


def _description(skill_md: str) -> str:
    m = re.search(r"^description:\s*(.+)$", skill_md, flags=re.MULTILINE)
    return m.group(1).strip().strip('"') if m else "(no description)"


def _episodes(store, run_id: str, prog: dict) -> list[Episode]:
    """A program's episodes in this run, test split excluded; a program whose content equals an earlier
    one's was served from the cache, so its episodes are found by content hash."""
    eps = store.episodes(run_id=run_id, program_id=prog["program_id"])
    if not eps and prog.get("program_hash"):
        _, rows = store.query("SELECT episode_id FROM episodes WHERE run_id = ? AND program_hash = ?",
                              [run_id, prog["program_hash"]])
        eps = store.episodes(ids=[r[0] for r in rows]) if rows else []
    return [e for e in eps if e.task.split != "test"]


def trace_name(e: Episode) -> str:
    task = re.sub(r"[^A-Za-z0-9]+", "-", e.task.id).strip("-")
    return f"{e.purpose}-{task}-{e.id[:8]}.txt"


def _write_traces(store, folder: Path, pid: str, episodes: list[Episode], root: Path) -> list[TraceRef]:
    traces = folder / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    missing = [e.id for e in episodes if not (traces / trace_name(e)).exists()]
    if missing:  # steps are loaded only for traces not written yet
        for full in store.episodes(ids=missing, with_steps=True):
            _write(traces / trace_name(full), Traces.episode(full) + "\n")
    index = ["file\tsplit\tpurpose\tcategory\ttask\tscore\twon\tcontext_tokens\terror"]
    refs = []
    for e in episodes:
        name = trace_name(e)
        error = (e.error or "").splitlines()[0][:160] if e.error else ""
        index.append(f"{name}\t{e.task.split}\t{e.purpose}\t{e.task.category}\t{e.task.id}\t{e.score:.3f}\t"
                     f"{int(e.won)}\t{e.prompt_tokens}\t{error}")
        refs.append(TraceRef(str((traces / name).relative_to(root)), pid, e))
    _write(traces / "index.tsv", "\n".join(index) + "\n")
    return refs


def _scores_text(pid: str, episodes: list[Episode], evaluations: list[dict]) -> str:
    lines = [f"# Scores of {pid}", "", "Episodes played, by split and purpose (train = rollouts that found failures, "
             "smoke = the one-task check, eval = dev evaluation):", "",
             "| split | purpose | episodes | mean score | won | context tokens/episode | errors | per category |",
             "|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list[Episode]] = {}
    for e in episodes:
        groups.setdefault((e.task.split, e.purpose), []).append(e)
    for (split, purpose), eps in sorted(groups.items()):
        cats: dict[str, list[float]] = {}
        for e in eps:
            cats.setdefault(e.task.category, []).append(e.score)
        per_cat = ", ".join(f"{c} {sum(v) / len(v):.2f}" for c, v in sorted(cats.items()))
        lines.append(f"| {split} | {purpose} | {len(eps)} | {sum(e.score for e in eps) / len(eps):.3f} | "
                     f"{sum(e.won for e in eps)} | {sum(e.prompt_tokens for e in eps) / len(eps):.0f} | "
                     f"{sum(1 for e in eps if e.error)} | {per_cat} |")
    if evaluations:
        lines += ["", "Official evaluations (what the frontier decided on):", "",
                  "| iteration | split | score | success | context tokens | per category |", "|---|---|---|---|---|---|"]
        for ev in evaluations:
            per_cat = ", ".join(f"{c} {v:.2f}" for c, v in (ev.get("per_category") or {}).items())
            lines.append(f"| {ev['iteration']} | {ev['split']} | {ev['score']:.3f} | {ev['success']:.3f} | "
                         f"{ev['context_tokens']:.0f} | {per_cat} |")
    return "\n".join(lines) + "\n"


def _proposal_text(prog: dict, proposal: dict | None) -> str:
    if proposal is None:
        return f"# {prog['program_id']}\n\nThe seed program (operator {prog.get('operator')}).\n"
    detail = proposal.get("detail") or {}
    text = (f"# {proposal['candidate_id']}\n\nproposer: {proposal['proposer']}\noperator: {proposal['operator']}\n"
            f"parent: {proposal['parent_id']}\niteration: {proposal['iteration']}\n"
            f"mechanism: {detail.get('mechanism', '')}\nstatus: {proposal['status']}\n\n"
            f"## Hypothesis\n{proposal.get('hypothesis') or ''}\n\n## Outcome\n{proposal.get('reason') or ''}\n")
    if detail.get("raw"):  # the proposer's own answer (its last 4000 characters)
        text += f"\n## The proposer's answer\n````\n{detail['raw']}\n````\n"
    return text


def summary_rows(proposals, dev_scores: dict[str, float]) -> list[dict]:
    rows = []
    for p in proposals:
        scores = p.get("scores") or {}
        score = dev_scores.get(p["candidate_id"], scores.get("score"))
        parent = dev_scores.get(p["parent_id"])
        delta = score - parent if isinstance(score, (int, float)) and parent is not None \
            and p["status"] in ("admitted", "discarded") and "probe_score" not in scores else None
        rows.append({"candidate": p["candidate_id"], "iteration": p["iteration"], "proposer": p["proposer"],
                     "parent": p["parent_id"], "mechanism": (p.get("detail") or {}).get("mechanism", ""),
                     "hypothesis": p.get("hypothesis") or "", "status": p["status"],
                     "reason": (p.get("reason") or "").strip().splitlines()[0][:160] if p.get("reason") else "",
                     "dev_score": score, "probe_score": scores.get("probe_score"), "delta": delta,
                     "context_tokens": scores.get("context_tokens")})
    return rows


def _num(x, fmt: str = "{:.3f}", signed: bool = False) -> str:
    if not isinstance(x, (int, float)):
        return ""
    return ("{:+.3f}" if signed else fmt).format(x)


def _summary_text(rows: list[dict]) -> str:
    lines = ["# Evolution summary", "", "Every proposal of this run, oldest first. delta = dev score minus the parent's "
             "(full dev split only; a candidate stopped after the probe shows its probe score).", "",
             "| candidate | it | proposer | parent | mechanism | hypothesis | outcome | dev score | delta | "
             "context tokens |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        score = _num(r["dev_score"]) if r["probe_score"] is None else f"probe {_num(r['probe_score'])}"
        hyp = r["hypothesis"].replace("|", "/").replace("\n", " ")[:160]
        outcome = f"{r['status']}: {r['reason']}".replace("|", "/") if r["reason"] else r["status"]
        lines.append(f"| {r['candidate']} | {r['iteration']} | {r['proposer']} | {r['parent']} | {r['mechanism']} | "
                     f"{hyp} | {outcome} | {score} | {_num(r['delta'], signed=True)} | "
                     f"{_num(r['context_tokens'], '{:.0f}')} |")
    return "\n".join(lines) + "\n"


def _frontier_text(frontier) -> str:
    lines = ["# Frontier", "", "Objectives: " + ", ".join(frontier.to_dict()["objectives"]), "",
             "| program | metrics |", "|---|---|"]
    for m in frontier.members:
        lines.append(f"| {m.program_id} | " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(m.metrics.items())) + " |")
    return "\n".join(lines) + "\n"


def _readme() -> str:
    return ("# Meta-Harness workspace\n\nEverything this run knows about every harness candidate, as files. "
            "Start with summary.md (what was tried and how it went), then read the candidates' harness source "
            "(candidates/<id>/harness/harness.py), their diffs (diff.patch), scores (scores.md) and raw episode "
            "traces (candidates/<id>/traces/, listed in traces/index.tsv with scores and errors). Traces show "
            "the exact context the model saw at each step: that is where a harness's mistakes show.\n\n"
            "Gold answers appear in traces for diagnosis only: a harness that contains a gold answer or a "
            "task id, or that reads a task's gold or seed, is rejected.\n\n"
            "## The harness interface (evolver/harness.py)\n\n" + Harnesses.INTERFACE.strip() + "\n")
