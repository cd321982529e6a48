"""The run report: the seed, the evolved best and the best-of-N baseline on test with their paired
differences, the frontier table, every candidate with its paired dev evidence, each admitted program's
diff, tokens used. Written as Markdown (for people) and JSON (for scripts) under ``store/reports/``, and in
every format a plugin registers (hook ``register_report_formats``; ``html`` comes with evolver-ui)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolver import plugins
from evolver.errors import EvolverError, PluginError
from evolver.estimate import priced_by


def text_table(cols: list[str], rows: list[list]) -> str:
    """A plain-text table for the terminal: a header, a rule, one line per row, columns padded to fit."""
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) if rows else len(str(c)) for i, c in enumerate(cols)]
    line = lambda vals: "  ".join(str(v).ljust(w) for v, w in zip(vals, widths)).rstrip()
    return "\n".join([line(cols), line(["-" * w for w in widths])] + [line(r) for r in rows])


def normalised_gain(p_skill: float, p_none: float) -> float | None:
    """SkillsBench's g = (P_skill - P_none) / (1 - P_none); None when the baseline is perfect."""
    return None if p_none >= 1.0 else (p_skill - p_none) / (1.0 - p_none)


PAIRED_LINES = (("best_vs_seed", "Best vs seed"), ("best_of_n_vs_seed", "Best-of-{n} vs seed"),
                ("best_vs_best_of_n", "Best vs best-of-{n}"))


def paired_lines(summary: dict) -> list[str]:
    """One line per paired comparison on test: what the console prints at the end of a run, too. Each is
    also the comparison's ``line`` in the summary (:func:`with_lines`), which other reports show as it is."""
    n = (summary.get("best_of_n") or {}).get("n", "N")
    out = []
    for key, label in PAIRED_LINES:
        c = (summary.get("paired") or {}).get(key)
        if c:
            out.append(f"{label.format(n=n)} on test: {c['diff']:+.3f}, {c['level']:.0%} bootstrap interval "
                       f"[{c['low']:.3f}, {c['high']:.3f}] on {c['n']} tasks (paired).")
    return out


def with_lines(summary: dict) -> dict:
    """``summary`` with each paired comparison's :func:`paired_lines` line stored beside its numbers."""
    keys = [k for k, _ in PAIRED_LINES if (summary.get("paired") or {}).get(k)]
    for key, line in zip(keys, paired_lines(summary)):
        summary["paired"][key]["line"] = line
    return summary


HAND_WRITTEN = " (hand-written pack)"


def hand_written_programs(repo, program_ids) -> dict[str, list[str]]:
    """program id -> its skills marked ``metadata.hand_written`` (written by hand for the benchmark, not
    learned), for the programs that carry any. A program the repository cannot read is left out."""
    out = {}
    for pid in dict.fromkeys(program_ids):
        try:
            names = repo.hand_written_skills(pid)
        except Exception:  # a label must never cost the report
            continue
        if names:
            out[pid] = names
    return out


def label(summary: dict, pid: str) -> str:
    """`` (hand-written pack)`` when the summary's ``hand_written`` names ``pid``, else ''."""
    return HAND_WRITTEN if pid in (summary.get("hand_written") or {}) else ""


def hand_written_note(summary: dict) -> list[str]:
    hw = summary.get("hand_written") or {}
    if not hw:
        return []
    names = sorted({n for skills in hw.values() for n in skills})
    return ["", f"Programs marked{HAND_WRITTEN} carry skills written by hand for this benchmark, not learned: "
                f"{', '.join(names)}."]


def spend_note(spend: dict | None) -> str:
    """" (N calls, cost X)" for a role's spend (:meth:`evolver.budget.Ledger.spend`); "" without one."""
    if not spend:
        return ""
    cost = f", cost {spend['cost']:.4g}" if spend.get("cost") else ""
    return f" ({spend['calls']} calls{cost})"


def early_lines(rows: list[dict], dev_episodes: dict[str, int] | None = None) -> list[str]:
    """Staged evaluation's early stops: candidates that could no longer be admitted, and candidates already
    certain to be, with the dev episodes neither played. ``dev_episodes``: each program's largest dev
    evaluation (its episodes); a member admitted early (one episode a task it played) whose largest is
    bigger played the rest of dev later, before the next candidates were judged against it, and saved
    nothing in the end."""
    stopped = [r for r in rows if isinstance((r.get("scores") or {}).get("saved_episodes"), int)]
    if not stopped:
        return []
    early = [r for r in stopped if "certain" in r["scores"]]
    hopeless = [r for r in stopped if "certain" not in r["scores"]]
    completed = [r for r in early if (dev_episodes or {}).get(r["candidate_id"], 0) > r["scores"]["dev_tasks"]]
    saved = sum(r["scores"]["saved_episodes"] for r in stopped if r not in completed)
    parts = []
    if hopeless:
        parts.append(f"{len(hopeless)} candidates stopped before the whole dev split, when their paired score "
                     "against their parent could no longer be admitted")
    if early:
        parts.append(f"{len(early)} stopped when already certain to be admitted (paired score better than every "
                     "member's at the interim level), and were admitted on the tasks they played"
                     + (f"; {len(completed)} of them played the rest of dev later, before candidates were judged "
                        "against them" if completed else ""))
    return ["", f"Early stopping: {'; '.join(parts)}; {saved} dev episodes not played."]


def plan_lines(summary: dict) -> list[str]:
    """What the run said it would play at most before it started, beside what it stored."""
    plan = summary.get("plan")
    if not plan:
        return []
    parts = ", ".join(f"{k} {v}" for k, v in plan["parts"].items())
    return ["", "## Plan", "", f"Before it started the run said the loop would play at most {plan['episodes']} "
            f"episodes ({parts}) with at most {plan['calls']} model calls besides tool calls. It stored "
            f"{summary.get('episodes_stored', 0)} episodes (a proposer's own included; an episode the cache "
            "already held is not stored again)."] + estimate_lines(summary)


def quiet_lines(iterations: list[dict]) -> list[str]:
    """Each iteration's proposers that built nothing, with what each said last (its reason), and the
    iterations skipped whole: a run with no candidates says why."""
    out = []
    for row in iterations:
        s = row.get("summary") or {}
        if s.get("note") and not s.get("candidates") and not s.get("quiet"):
            out.append(f"- iteration {row['iteration']}: {s['note']}")
        out += [f"- iteration {row['iteration']}: {name} built nothing: {why}"
                for name, why in (s.get("quiet") or {}).items()]
    return ["", "Proposers that built nothing, in their words:", ""] + out if out else []


def estimate_lines(summary: dict) -> list[str]:
    """What the run estimated it would spend before its search, beside what every role spent."""
    est, spend = summary.get("estimate"), summary.get("spend") or {}
    if not est:
        return []
    tokens = sum(s.get("tokens", 0) for s in spend.values())
    calls = sum(s.get("calls", 0) for s in spend.values())
    off = lambda guess, real: f" ({(guess - real) / real:+.0%})" if real else ""  # noqa: E731
    lines = ["", f"Before its search it estimated ~{est['tokens']:,} tokens{off(est['tokens'], tokens)} and "
             f"~{est['calls']:,} model calls{off(est['calls'], calls)} in {est['iterations']} iterations; every "
             f"role together spent {tokens:,} tokens in {calls:,} calls, in {summary.get('iterations', 0)} "
             f"iterations.{_priced(est)}"]
    if r := est.get("revised"):
        lines.append(f"Once its first candidates had played their smoke episodes it said ~{r['tokens']:,} tokens"
                     f"{off(r['tokens'], tokens)} ({r['candidates']} candidate{'s' if r['candidates'] != 1 else ''} "
                     f"an iteration at {r['ratio']:.2f}x the seed's rate).")
    return lines + [f"After iteration {f['after']} it forecast ~{f['tokens']:,} tokens{off(f['tokens'], tokens)} "
                    f"({f['iterations_left']} more iterations)." for f in summary.get("forecasts") or []]


def _priced(est: dict) -> str:
    """How the first estimate priced candidates, when anything did."""
    by = priced_by(est)
    if est.get("ratio") is None:
        return ""
    return (f" It priced candidates at {est['ratio']:.2f}x the seed's rate: "
            + (f"as their proposers said ({by})." if by else "as in the store's earlier runs."))


def _row(name: str, m: dict) -> str:
    return f"| {name} | {m['score']:.3f} | {m['success']:.3f} | {m['context_tokens']:.0f} | {m['cost']:.0f} |"


def render(run, summary: dict) -> str:
    test = summary["test"]
    base, best = summary["baseline"], summary["best"]
    b, t = test.get(base, {}), test.get(best, {})
    bon = summary.get("best_of_n")
    lines = [f"# evolver run {run.id}", "",
             f"Benchmark `{run.config.benchmark}` {json.dumps(run.config.benchmark_options)}; "
             f"{summary['iterations']} iterations; {summary['wall_s']:.0f} s wall.", "",
             "## Test split (never seen by selection)", "",
             "| program | score | success | context tokens/episode | tokens/episode |",
             "|---|---|---|---|---|"]
    for pid, m in test.items():
        tag = " (baseline)" if pid == base else (" (best on dev)" if pid == best else "")
        lines.append(_row(f"{pid}{tag}{label(summary, pid)}", m))
    if bon:
        lines.append(_row(f"{bon['program']}{label(summary, bon['program'])}, best of {bon['n']} (no evolution)",
                          bon["test"]))
    lines += hand_written_note(summary)
    lines += [""] + paired_lines(summary) if summary.get("paired") else []
    g = normalised_gain(t["score"], b["score"]) if b and t else None
    if summary.get("paired"):
        lines += ["", f"Normalised gain of the best over the seed on test: g = {g:+.3f}."] if g is not None else []
    elif b and t:  # a summary from before the paired comparisons
        lines += ["", f"Best vs seed on test: {t['score'] - b['score']:+.3f} absolute"
                  + (f", normalised gain g = {g:+.3f}" if g is not None else "") + "."]
    if bon and bon["n"] == 1:
        lines += ["", f"Best of 1: the seed program sampled once at T={bon['temperature']:g} (seed {bon['seed']}) "
                  "on test. N = the candidates this run evaluated on dev: one here, so there was nothing to "
                  "pick on dev."]
    elif bon:
        ds = bon["dev_scores"]
        spread = ", ".join(f"{x:.3f}" for x in ds) if len(ds) <= 12 else f"{min(ds):.3f} to {max(ds):.3f}"
        lines += ["", f"Best of {bon['n']}: the seed program sampled at T={bon['temperature']:g} with {bon['n']} "
                  f"seeds on dev (scores {spread}); seed {bon['seed']}, "
                  f"the best on dev ({bon['dev']:.3f}), played on test. N = the candidates this run evaluated "
                  "on dev: how much of the gain evolution adds over trying again."]
    # Context tokens per episode are shown even when they are not an objective: they are what a harness costs.
    columns = [o.split(":")[0] for o in summary["frontier"]["objectives"]]
    columns += [c for c in ("score", "context_tokens") if c not in columns]
    gate = summary["frontier"].get("gate")
    rule = ("" if gate is None else "; plain Pareto on dev means (gate off)" if gate == "none" else
            f"; admission by a paired {gate} test at {summary['frontier'].get('level', 0.95):.0%} on the dev tasks")
    lines += ["", "## Frontier (dev)", "", f"Objectives: {', '.join(summary['frontier']['objectives'])}{rule}.", "",
              "| program | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for m in summary["frontier"]["members"]:
        vals = [f"{m['metrics'][c]:.3f}" if c in m["metrics"] else "" for c in columns]
        lines.append(f"| {m['program_id']}{label(summary, m['program_id'])} | " + " | ".join(vals) + " |")
    rows = run.store.proposals(run.id)
    lines += ["", "## Candidates", "", f"{len(rows)} proposed, "
              f"{sum(r['status'] in ('admitted', 'discarded') for r in rows)} valid (evaluated), "
              f"{sum(r['status'] == 'admitted' for r in rows)} admitted.", "",
              "| id | proposer | operator | parent | status | dev score | paired dev diff [interval] | reason |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        score = (r.get("scores") or {}).get("score")
        part = (r.get("scores") or {}).get("dev_tasks")  # admitted early: the tasks it played, not the split
        c = (r.get("scores") or {}).get("paired")
        paired = f"{c['diff']:+.3f} [{c['low']:.3f}, {c['high']:.3f}] vs {c['versus']}, n={c['n']}" if c else ""
        reason = (r.get("reason") or "").splitlines()[0].split(" (score ")[0][:80] if r.get("reason") else ""
        lines.append(f"| {r['candidate_id']} | {r['proposer']} | {r['operator']} | {r['parent_id']} | {r['status']} | "
                     f"{'' if score is None else f'{score:.3f}'}{f' ({part} tasks)' if part else ''} | {paired} | "
                     f"{reason} |")
    lines += quiet_lines(run.store.iterations(run.id))
    most: dict[str, int] = {}
    for ev in run.store.evaluations(run.id, split="dev"):
        most[ev["program_id"]] = max(most.get(ev["program_id"], 0), ev["n"])
    lines += early_lines(rows, most)
    lines += monitor_lines(run, rows)
    lines += cut_lines(run)
    lines += judge_lines(run)
    lines += ["", "## Tokens", ""] + [f"- {role}: {n}{spend_note((summary.get('spend') or {}).get(role))}"
                                      for role, n in sorted(summary["tokens"].items())]
    lines += plan_lines(summary)
    for r in rows:
        if r["status"] == "admitted":
            diff = run.repo.diff(r["parent_id"], r["candidate_id"])
            mechanism = (r.get("detail") or {}).get("mechanism")
            lines += ["", f"## Diff of {r['candidate_id']} ({r['operator']}: {r['hypothesis'][:80]})", ""]
            lines += [f"Mechanism: {mechanism}", ""] if mechanism else []
            lines += ["```diff", diff.strip()[:6000], "```"]
    return "\n".join(lines) + "\n"


def cut_lines(run) -> list[str]:
    """Text the harness cut to fit its budgets (:func:`evolver.harness.cut_marker` in a stored prompt), per
    split: the steps that showed a cut, the tokens missing, and the episodes whose task prompt was cut
    (the model never read the whole task)."""
    from evolver.harness import CUT_PATTERN

    _, rows = run.store.query(
        "SELECT e.split, e.episode_id, s.prompt FROM steps s JOIN episodes e USING (episode_id) "
        "WHERE e.run_id = ? AND s.prompt LIKE '%more tokens cut]%'", [run.id])
    if not rows:
        return []
    per: dict = {}
    for split, episode, prompt in rows:
        found = [int(n) for n in re.findall(CUT_PATTERN, prompt or "")]
        if not found:
            continue
        steps, tokens, tasks = per.setdefault(split, [0, 0, set()])
        per[split][0], per[split][1] = steps + 1, tokens + sum(found)
        if _task_cut(prompt, CUT_PATTERN):
            tasks.add(episode)
    if not per:
        return []
    lines = ["", "## Cut to fit the context", ""]
    for split, (steps, tokens, tasks) in sorted(per.items()):
        lines.append(f"- {split}: {steps} steps showed text cut to fit ({tokens} tokens missing in all)"
                     + (f"; in {len(tasks)} episodes the task prompt itself was cut, so the model never read "
                        "all of it" if tasks else "") + ".")
    lines.append("- Budgets are shares of the executor's context window (a larger model reads more); a "
                 "task's hints (`observation_tokens`, `tools_tokens`, `actions_tokens`) set them outright.")
    return lines


def _task_cut(prompt: str, pattern: str) -> bool:
    """Whether the seed harness's ``Task:`` section of a stored prompt ends in a cut marker."""
    try:
        texts = [m.get("content") or "" for m in json.loads(prompt) if isinstance(m, dict)]
    except (ValueError, TypeError, AttributeError):
        return False
    for text in texts:
        head = re.split(r"\n\n(?:Observation: |Notes from earlier steps:|Earlier actions: |Recent steps:|\[)", text)[0]
        if text.startswith("Task: ") and re.search(pattern, head):
            return True
    return False


def monitor_lines(run, proposals: list[dict]) -> list[str]:
    """The anti-hack monitor's counts: candidates whose code it rejected, and per program the actions and
    tool calls it flagged, confirmed and blocked while they played."""
    mode = run.config.loop.monitor
    rejected = sum(1 for r in proposals if (r.get("reason") or "").startswith("monitor"))
    verdicts = [v for r in proposals if isinstance(v := (r.get("detail") or {}).get("monitor"), dict)]
    confirmed = sum(1 for v in verdicts if v.get("confirmed"))
    role = run.config.roles.get("judge")
    judges = sorted({v["judge"] for v in verdicts if v.get("judge")})
    named = ", ".join(judges) or (f"{role.backend}: {role.model or 'the embedded SmolLM2-135M-Instruct'}"
                                  if role else "none")
    who = (f" The judge ({named}; `[roles.judge]` names another) confirmed {confirmed} and cleared "
           f"{len(verdicts) - confirmed}." if mode == "judge" else
           " In `rules` mode every flag rejects; no judge is asked." if mode == "rules" else "")
    counts = run.store.monitor_counts(run.id)
    lines = ["", "## Monitor", "", f"Mode `{mode}`. Candidates whose code its rules flagged: {len(verdicts)}.{who} "
             f"Candidates whose code it rejected: {rejected}. "
             + ("Steps it flagged while programs played:" if counts else "No action or tool call was flagged.")]
    if counts:
        lines += ["", "| program | flagged | confirmed | blocked |", "|---|---|---|---|"]
        lines += [f"| {pid} | {c['flagged']} | {c['confirmed']} | {c['blocked']} |" for pid, c in counts.items()]
    return lines


def judge_lines(run) -> list[str]:
    """What the judge of judge-scored tasks (``evolver.judge``) did, when the run had such tasks: its
    groups and requests, its position bias (the passes' disagreement) and the groups it gave no signal."""
    rows = run.store.judgements(run.id)
    if not rows:
        return []
    spread = [r["disagreement"] for r in rows if r["disagreement"] is not None]
    bias = (f"; the two orders disagreed by {sum(spread) / len(spread):.2f} on average (normalised Kendall "
            "distance: 0 the same ranking both ways, 1 reversed)") if spread else ""
    unread = sum(1 for r in rows if r["error"])
    tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows)
    return ["", "## Judge-scored tasks", "",
            f"{len(rows)} groups ranked by {', '.join(sorted({r['judge_model'] for r in rows}))} in "
            f"{sum(r['calls'] for r in rows)} requests ({tokens} tokens){bias}. Groups with a reply it could not "
            f"read: {unread} (`evolver traces \"SELECT task_id, error FROM judgements WHERE error IS NOT NULL\"`)."]


def write_report(run, summary: dict) -> Path:
    """Write the Markdown and JSON reports, then every registered report format (a format that fails is
    logged: the run's results are in the store and the Markdown already). Returns the Markdown's path."""
    out = Path(run.config.store) / "reports"
    out.mkdir(parents=True, exist_ok=True)
    md = out / f"{run.id}.md"
    md.write_text(render(run, summary))
    (out / f"{run.id}.json").write_text(json.dumps(summary, indent=2, default=str))
    try:
        write_formats(ReportContext(run.id, summary, run.store, run.repo, out))
    except PluginError as exc:
        run.log(f"report: {exc}")
    return md


@dataclass
class ReportContext:
    """What a report format (hook ``register_report_formats``) is handed. New attributes may appear;
    a format ignores what it does not use.

    :ivar run_id: the run the report is about.
    :ivar summary: the run's summary (``store/reports/RUN.json``): ``test`` (per program: score, success,
        context_tokens, cost, per_category), ``baseline``, ``best``, ``best_of_n``, ``paired``, ``frontier``
        (objectives and members with their dev metrics), ``tokens``, ``iterations``, ``wall_s``, ``hand_written``
        (program id -> its hand-written skills, for the programs that carry any: label them, see :func:`label`).
    :ivar store: the run's :class:`evolver.Store`, to read (it may be open read-only): ``programs``,
        ``proposals``, ``evaluations``, ``frontier_events`` of ``run_id``, and ``train_steps`` through
        ``Store.query`` (training runs inside the loop are ``RUN-<operator>-it<N>``).
    :ivar repo: the :class:`evolver.ProgramRepo`: ``repo.diff(parent, child)`` is a program's diff.
    :ivar folder: where reports go (``store/reports/``); a format writes ``folder / f"{run_id}.<suffix>"``.
    """

    run_id: str
    summary: dict
    store: Any
    repo: Any
    folder: Path


def write_formats(report: ReportContext) -> dict[str, Path]:
    """Write every registered report format; returns name -> path. A format that fails is a PluginError
    naming it (the others are still written)."""
    written, failed = {}, []
    for name, entry in sorted(plugins.registries()["report_format"].entries.items()):
        try:
            written[name] = Path(entry.factory(report))
        except ImportError as exc:  # a plugin installed without what it needs (pip --no-deps)
            failed.append(f"report format {name!r} (plugin {entry.plugin}) needs {exc.name or exc!s}, which is not "
                          "installed: install the plugin with its dependencies")
        except Exception as exc:  # one format's bug must not cost the others
            failed.append(f"report format {name!r} (plugin {entry.plugin}) failed: {exc!r}")
    if failed:
        raise PluginError("; ".join(failed))
    return written


def partial_report(store, row: dict) -> str:
    """What a run that has not written its report (stopped, killed, or still running) measured so far,
    from the store alone: its dev evaluations per program (the latest of each), its candidates, and
    the frontier of its last finished iteration. Marked partial: no final test was played."""
    run_id = row["run_id"]
    lines = [f"# evolver run {run_id} (partial)", "",
             f"**Partial report**: the run is `{row['status']}` and wrote no report, so no final test was "
             "played. What follows is what it measured so far (`evolver run --resume` continues it).", "",
             f"Benchmark `{row.get('benchmark')}`; {len(store.iterations(run_id))} iterations started.", ""]
    latest: dict[str, dict] = {}
    for ev in store.evaluations(run_id, split="dev"):
        latest[ev["program_id"]] = ev
    lines += ["## Dev evaluations so far", ""]
    if latest:
        lines += ["| program | score | success | tasks |", "|---|---|---|---|"]
        lines += [f"| {pid} | {ev['score']:.3f} | {ev['success']:.3f} | {ev['n']} |" for pid, ev in latest.items()]
    else:
        lines += ["None yet: the run stopped before the seed's dev evaluation finished."]
    its = [i for i in store.iterations(run_id) if i["status"] == "finished"]
    frontier = (its[-1]["summary"] or {}).get("frontier") if its else None
    if frontier:
        lines += ["", f"Frontier after iteration {its[-1]['iteration']}: "
                  + ", ".join(m["program_id"] for m in frontier["members"]) + "."]
    rows = store.proposals(run_id)
    lines += ["", "## Candidates so far", ""]
    if rows:
        lines += ["| id | proposer | operator | status | dev score | reason |", "|---|---|---|---|---|---|"]
        for r in rows:
            score = (r.get("scores") or {}).get("score")
            reason = (r.get("reason") or "").splitlines()[0][:80] if r.get("reason") else ""
            lines.append(f"| {r['candidate_id']} | {r['proposer']} | {r['operator']} | {r['status']} | "
                         f"{'' if score is None else f'{score:.3f}'} | {reason} |")
    else:
        lines += ["None yet."]
    lines += quiet_lines(its)
    summary = row.get("summary") or {}
    if summary.get("tokens"):  # a run stopped at its budget keeps what each role spent
        lines += ["", "## Tokens", ""] + [f"- {role}: {n}{spend_note((summary.get('spend') or {}).get(role))}"
                                          for role, n in sorted(summary["tokens"].items())]
        lines += estimate_lines(summary | {"iterations": len(its)})
    return "\n".join(lines) + "\n"


def latest_report(config, run_id: str | None = None) -> Path:
    """The Markdown report of ``run_id``, or of the run that finished last. EvolverError when there is none."""
    reports = Path(config.store) / "reports"
    files = sorted(reports.glob(f"{run_id or '*'}.md"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise EvolverError(f"no report in {reports}: runs write one when they finish")
    return files[-1]


def rewrite(config, md: Path) -> dict[str, Path]:
    """``evolver report``: every registered format of the Markdown report ``md``'s run written again from
    the store (opened read-only) and the run's summary (the JSON beside ``md``). Returns name -> path."""
    from evolver.workspace import open_workspace

    if not format_names():
        return {}
    if not md.with_suffix(".json").exists():
        raise EvolverError(f"{md.with_suffix('.json')} is missing: the other formats are drawn from the run's summary")
    summary = json.loads(md.with_suffix(".json").read_text())
    store, repo = open_workspace(config, read_only=True)
    if "hand_written" not in summary:  # a summary from before the label
        summary["hand_written"] = hand_written_programs(repo, list(summary.get("test") or {}))
    try:
        return write_formats(ReportContext(md.stem, summary, store, repo, md.parent))
    finally:
        store.close()


def format_names() -> list[str]:
    """The registered report formats (besides Markdown and JSON, which the core writes)."""
    return plugins.registries()["report_format"].names()
