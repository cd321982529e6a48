"""EvoSkill: failure-driven skill discovery.

Three roles, three separate calls (each may use its own backend and model):
  executor  plays the tasks (the core loop does this);
  proposer  reads failure traces, contrasting successes, existing skills and the feedback history H,
            and answers ``create`` or ``edit`` (which skill) with a justification;
  builder   writes or edits one skill folder, guided by the meta-skill ``skills/writing-skills``.

Improvements over the reference code: the proposer sees full traces (actions, observations, tool
calls), not only final answers; H comes from the trace store, so a resumed run keeps it; several
candidates are built per iteration and evaluated together by the core; a ``merge`` operator proposes
the union of the frontier members' distinct skills; gold answers are for diagnosis only and the
core's leakage audit rejects a candidate whose skills contain them.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from evolver import GenRequest, Message, Proposer, SkillCaps, SkillChecks, Skills

from evolver_evoskill import agentic
from evolver_evoskill.render import fit, render_history, render_skills, render_trace, with_cuts
from evolver_evoskill.verifier import SurrogateVerifier, surrogate_missed

#: The meta-skill that guides the builder; it ships with evolver (found in a checkout and in a wheel).
META_SKILL = Skills.shipped_dir() / "writing-skills" / "SKILL.md"

#: A reply that writes one line this many times is looping (stopped there; the checks reject it).
LOOPING_LINE = 3
PROPOSER_SYSTEM = (
    "You improve an AI agent by giving it skills: short written procedures it reads while working. "
    "Study how the agent failed, then propose ONE skill to create, or ONE existing skill to edit, that "
    "would prevent failures like these on new tasks. Never copy a gold answer or a task's exact "
    "solution into a skill: the skill must work on tasks it has not seen.")
ANSWER_FORMAT = ("Answer in exactly this format:\nACTION: create or edit\nSKILL: <skill-name>\n"
                 "WHY: <one sentence: the failure pattern>\nIDEA: <what the skill should tell the agent to do>")


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["single-call", "agentic"] = "single-call"
    """single-call: everything rendered into one prompt (small models); agentic: the proposer queries
    the trace store and reads files through tools before answering (capable models)."""
    builder_format: Literal["fields", "json"] = "fields"
    """fields: the builder writes the description and the body in two short calls and evolver
    assembles SKILL.md (robust for small models); json: one JSON answer with name, description,
    body and optional scripts (capable models)."""
    prompt_budget: int = 1500
    """Token budget of the proposer's evidence; longer inputs are cut by the ladder in render.py."""
    merge: bool = True
    """Propose the union of the frontier members' distinct skills when they differ."""
    agent_turns: int = 6
    """Tool calls allowed to the agentic proposer before it must answer."""
    max_body_chars: int = 1500
    """Cap on a built skill's body (the core's caps apply too)."""
    verifier: bool = False
    """EvoSkills' surrogate verifier: replay the candidate on its failure tasks, check assertions that
    an isolated judge wrote from the task and the transcript only; one revision, then reject."""


class EvoSkillProposer(Proposer):
    def __init__(self, run, **options):
        self.run = run
        self.options = Options(**options)
        self.meta_skill = META_SKILL.read_text() if META_SKILL.exists() else ""

    # -- the proposer's entry point ----------------------------------------------------------------
    def propose(self, ctx) -> list:
        drafts = []
        wanted = ctx.n
        if self.options.merge and wanted > 0:
            merged = self._merge(ctx)
            if merged is not None:
                drafts.append(merged)
                wanted -= 1
        # Each candidate is built by a generator that yields its model calls; the driver answers
        # the pending calls of all candidates as one batch per role, so n candidates cost about
        # as much wall time as one (batched generation: 23 vs 190 tokens/s at batch 1 vs 16 here).
        return drafts + self._drive([self._one(ctx, k) for k in range(wanted)])

    def _drive(self, builders) -> list:
        results: list = [None] * len(builders)
        pending: dict[int, Call] = {}

        def advance(i: int, value, error: Exception | None = None) -> None:
            try:
                pending[i] = builders[i].throw(error) if error else builders[i].send(value)
            except StopIteration as stop:
                results[i] = stop.value
        for i in range(len(builders)):
            advance(i, None)
        while pending:
            by_role: dict[str, list[int]] = {}
            for i, call in pending.items():
                by_role.setdefault(call.role, []).append(i)
            answered = {}
            for role, ids in by_role.items():
                rc = self.run.config.role(role)
                reqs = []
                for i in ids:
                    c = pending[i]
                    # With greedy decoding the k candidates would be identical: sample the later ones.
                    temperature = rc.temperature if (rc.temperature > 0 or c.k == 0) else 0.7
                    # A small model's reply that loops is rejected as degenerate anyway: stop it early.
                    reqs.append(GenRequest(messages=c.messages, max_tokens=c.max_tokens or rc.max_tokens,
                                           temperature=temperature, seed=1000 * max(self.run.iteration, 0) + c.k,
                                           max_line_repeats=LOOPING_LINE))
                for i, res in zip(ids, self.run.backend(role).generate(reqs)):
                    answered[i] = res
            for i, res in answered.items():
                call = pending.pop(i)
                advance(i, res.text, BuildError(f"{call.role} call failed: {res.error}") if res.error else None)
        return results

    # -- create / edit -----------------------------------------------------------------------------
    def _one(self, ctx, k: int):
        # Rotate which failures lead, so the k candidates of one iteration look at different evidence.
        failures = ctx.failures[k:] + ctx.failures[:k] if ctx.failures else []
        skills = _load(Path(ctx.parent.root))
        if self.options.mode == "agentic":
            answer = agentic.ask(self, ctx, failures, skills)
        else:
            answer = yield Call("proposer", self._proposer_prompt(ctx, failures, skills), k)
        plan = parse_plan(answer, skills, failures)
        plan["task_texts"] = [e.task.prompt for e in failures]  # the repair path rejects copies of these
        draft = ctx.new_draft(plan["action"], f"{plan['why']} {plan['idea']}".strip(),
                              detail={"skill": plan["skill"], "raw": answer[:2000]})
        shown = failures[:4]
        draft.forbidden = [e.task.id for e in shown] + [str(e.task.gold) for e in shown
                                                        if isinstance(e.task.gold, (str, int, float))]
        draft.forbidden_sequences = [list(map(str, e.task.gold)) for e in shown if isinstance(e.task.gold, list)]
        try:
            yield from self._build(draft, plan, skills, k)
            if self.options.verifier:
                yield from self._verify(ctx, draft, plan, skills, failures, k)
        except BuildError as exc:
            draft.reject(f"builder: {exc}")
        return draft

    def _verify(self, ctx, draft, plan: dict, skills, failures, k: int) -> None:
        verifier = SurrogateVerifier(self.run)
        escalate = surrogate_missed(ctx.history)
        verdict = verifier.verify(draft, failures, escalate)
        if not verdict.passed:  # one revision with the failed assertions as diagnostics
            plan = dict(plan, idea=f"{plan['idea']}\nThe previous version failed these checks: "
                                   f"{'; '.join(verdict.failed[:4])}")
            yield from self._build(draft, plan, skills, k + 1, rebuild=True)
            verdict = verifier.verify(draft, failures, escalate)
        draft.proposal.detail.update(verified=verdict.passed, assertions=[a[1] for a in verdict.assertions])
        if not verdict.passed:
            draft.reject(f"surrogate verifier: {'; '.join(verdict.failed[:3])}")

    def _proposer_prompt(self, ctx, failures, skills) -> list[Message]:
        def build(rung) -> str:
            fails = "\n\n".join(render_trace(e, rung) for e in failures[:rung.failures])
            wins = "\n\n".join(render_trace(e, rung, show_gold=False) for e in ctx.successes[:rung.successes])
            return (f"## Failed episodes (score below {self.run.config.loop.failure_threshold})\n{fails}\n\n"
                    f"## Successful episodes, for contrast\n{wins or '(none)'}\n\n"
                    f"## Existing skills\n{render_skills(skills)}\n\n"
                    f"## Earlier proposals and their outcome\n{render_history(ctx.history, rung)}")
        backend = self.run.backend("proposer")
        text, cuts = fit(build, self.options.prompt_budget, backend.count_tokens)
        return [Message("system", PROPOSER_SYSTEM), Message("user", with_cuts(text, cuts) + "\n\n" + ANSWER_FORMAT)]

    # -- the builder -------------------------------------------------------------------------------
    def _build(self, draft, plan: dict, skills, k: int, rebuild: bool = False) -> None:
        skills_dir = Path(draft.path) / "skills"
        current = next((s for s in skills if s.name == plan["skill"]), None)
        if rebuild and current is None:  # a revision replaces the skill this draft created
            shutil.rmtree(skills_dir / draft.proposal.detail.get("skill", plan["skill"]), ignore_errors=True)
        header = (f"{self.meta_skill}\n\n## The proposal\nAction: {plan['action']} skill `{plan['skill']}`\n"
                  f"Failure pattern: {plan['why']}\nIdea: {plan['idea']}\n")
        if current is not None:
            header += f"\n## The current SKILL.md of {current.name}\n{(Path(current.path) / 'SKILL.md').read_text()}\n"
        if self.options.builder_format == "json":
            spec = yield from self._build_json(header, k, plan.get("task_texts", ()))
        else:
            spec = yield from self._build_fields(header, plan, k)
        spec["name"] = plan["skill"] if current is not None else slug(spec.get("name") or plan["skill"])
        draft.proposal.detail["skill"] = spec["name"]
        if current is not None:
            # ``current`` was read from the parent's checkout: delete the copy in THIS draft's worktree.
            shutil.rmtree(skills_dir / current.name, ignore_errors=True)
            meta = dict(current.meta)
            meta["version"] = bump(str(meta.get("version", "0.1.0")))
        else:
            meta = {"version": "0.1.0"}
        meta["origin"] = f"evoskill {draft.candidate_id}"
        folder = Skills.write(skills_dir, spec["name"], spec["description"], spec["body"], meta=meta,
                              scripts=spec.get("scripts") or None)
        problems = _validate(folder)
        if problems:
            raise BuildError("; ".join(problems))

    def _build_fields(self, header: str, plan: dict, k: int) -> dict:
        ask_desc = header + ("\nWrite the skill's description: ONE sentence starting with 'Use when' that says "
                             "when the agent should apply it.\nDescription:")
        description = _first_line((yield Call("builder", [Message("user", ask_desc)], k, 80)))
        ask_body = header + (f"\nDescription: {description}\nWrite the skill's body: 3 to 8 short numbered "
                             "steps, general (no task-specific answers).\n1.")
        body = (yield Call("builder", [Message("user", ask_body)], k, 300)).strip()
        body = ("1. " + body) if body and not body.startswith("1") else body
        quality = {"name": plan["skill"], "task_texts": plan.get("task_texts", ())}
        problem = _field_problem(description, body, self.options.max_body_chars, **quality)
        if problem:  # one repair attempt, naming the problem
            repair = header + f"\nYour previous answer was invalid: {problem}.\nWrite the numbered steps again.\n1."
            body = "1. " + (yield Call("builder", [Message("user", repair)], k + 1, 300)).strip()
            if not description.lower().startswith("use when"):
                description = f"Use when {plan['why'] or plan['idea']}".strip()[:300]
            problem = _field_problem(description, body, self.options.max_body_chars, **quality)
            if problem:
                raise BuildError(f"invalid after one repair: {problem}")
        return {"description": description, "body": body[: self.options.max_body_chars]}

    def _build_json(self, header: str, k: int, task_texts=()) -> dict:
        ask = header + ('\nAnswer with one JSON object: {"name": "...", "description": "Use when ...", '
                        '"body": "1. ...", "scripts": {"tool.py": "..."}} (scripts optional).')
        text = yield Call("builder", [Message("user", ask)], k)
        spec, problem = _parse_json_spec(text, task_texts)
        if problem:
            text = yield Call("builder", [Message("user", ask + f"\nYour previous answer was invalid: {problem}. "
                                          "Answer with the JSON object only.")], k + 1)
            spec, problem = _parse_json_spec(text, task_texts)
            if problem:
                raise BuildError(f"invalid after one repair: {problem}")
        return spec

    # -- merge -------------------------------------------------------------------------------------
    def _merge(self, ctx):
        """The union of the distinct skills of frontier members (EvoSkill's best reference number)."""
        members = ctx.frontier.members
        if len(members) < 2:
            return None
        best = ctx.frontier.best()
        union: dict[str, Path] = {}
        sources: dict[str, str] = {}
        for m in sorted(members, key=lambda m: m.program_id != best.program_id):
            program = self.run.repo.checkout(m.program_id)
            for s in _load(Path(program.root)):
                if s.name not in union:
                    union[s.name], sources[s.name] = Path(s.path), m.program_id
        base = {s.name for s in _load(Path(self.run.repo.checkout(best.program_id).root))}
        extra = sorted(set(union) - base)
        if not extra:
            return None
        signature = ",".join(sorted(union))
        if any((h.get("detail") or {}).get("merge") == signature for h in ctx.history):
            return None  # this exact union was tried already
        draft = ctx.new_draft("merge", f"union of the frontier's skills: adds {', '.join(extra)} to {best.program_id}",
                              parent_id=best.program_id, detail={"merge": signature, "from": sources})
        for name in extra:
            shutil.copytree(union[name], Path(draft.path) / "skills" / name, dirs_exist_ok=True)
        return draft


class BuildError(Exception):
    pass


@dataclass
class Call:
    """One model call a candidate's builder is waiting for (answered in a batch by ``_drive``)."""

    role: str
    messages: list
    k: int
    max_tokens: int | None = None


# -- parsing, lenient where a small model needs it, strict where the file format needs it ------------

def parse_plan(text: str, skills, failures) -> dict:
    """Read ACTION / SKILL / WHY / IDEA; fill what is missing from the evidence, never from gold."""
    fields = {}
    for key in ("ACTION", "SKILL", "WHY", "IDEA"):
        m = re.search(rf"^\W*{key}\W*:\s*(.+)$", text, flags=re.IGNORECASE | re.MULTILINE)
        fields[key.lower()] = m.group(1).strip() if m else ""
    names = {s.name for s in skills}
    action = "edit" if fields["action"].lower().startswith("edit") else "create"
    name = slug(fields["skill"])
    if action == "edit" and name not in names:
        action = "create"
    if not name:
        top = Counter(e.task.category for e in failures).most_common(1)
        name = slug(f"{top[0][0] if top else 'task'}-procedure")
    if action == "create" and name in names:
        action = "edit"
    idea = fields["idea"] or (text.strip()[:400] if not any(fields.values()) else "")
    return {"action": action, "skill": name, "why": fields["why"][:300], "idea": idea[:600]}


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", (text or "").lower()).strip("-")
    return s[:48].strip("-")


def bump(version: str) -> str:
    parts = (version.split(".") + ["0", "0", "0"])[:3]
    try:
        major, minor, patch = (int(p) for p in parts)
    except ValueError:
        return "0.1.1"
    return f"{major}.{minor}.{patch + 1}"


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip().strip('"').strip()
        if line:
            return line[:400]
    return ""


def _field_problem(description: str, body: str, max_chars: int, name: str = "skill", task_texts=()) -> str:
    if len(description) < 10:
        return "the description is empty or too short"
    steps = [ln for ln in body.splitlines() if re.match(r"\s*\d+[.)]\s*\S", ln)]
    if len(body.strip()) < 20 or not steps:
        return "the body has no numbered steps"
    if "---" in body[:10]:
        return "the body must not contain front matter"
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    if len(lines) >= 4 and len(set(lines)) <= len(lines) // 2:
        return "the body repeats the same lines (degenerate output)"
    if "3 to 8 short numbered steps" in body or "The proposal:" in body:
        return "the body echoes the instructions instead of giving steps"
    degenerate = SkillChecks.content_problems(name, description, body[:max_chars], task_texts)  # the core's rules
    return degenerate[0] if degenerate else ""


def _parse_json_spec(text: str, task_texts=()) -> tuple[dict, str]:
    m = re.search(r"\{[\s\S]*\}", text)
    if not m:
        return {}, "no JSON object found"
    try:
        spec = json.loads(m.group(0))
    except json.JSONDecodeError as exc:
        return {}, f"JSON does not parse: {exc}"
    if not isinstance(spec, dict):
        return {}, "the JSON is not an object"
    missing = [k for k in ("name", "description", "body") if not str(spec.get(k, "")).strip()]
    if missing:
        return {}, f"missing fields {missing}"
    scripts = spec.get("scripts") or {}
    if not isinstance(scripts, dict) or not all(isinstance(v, str) for v in scripts.values()):
        return {}, "scripts must map file names to source text"
    spec["scripts"] = {Path(k).name: v for k, v in scripts.items()}
    degenerate = SkillChecks.content_problems(slug(str(spec["name"])), str(spec["description"]), str(spec["body"]),
                                              task_texts)
    return spec, degenerate[0] if degenerate else ""


def _load(root: Path):
    skills_dir = root / "skills"
    return Skills.load(skills_dir, strict=False) if skills_dir.exists() else []


def _validate(folder: Path) -> list[str]:
    from evolver import SkillError, Skills

    try:
        return Skills.validate(Skills.parse(folder), SkillCaps())
    except SkillError as exc:
        return [str(exc)]
