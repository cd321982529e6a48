"""Meta-Harness: search over harness code, with the whole history as files.

Each iteration, before proposing, the workspace (workspace.py) is refreshed from the trace store and the
program repository: every prior candidate's source, scores per split and category, raw per-episode traces
and the evolution summary. Then ``ctx.n`` new harnesses (the loop's share; 2 per iteration by default)
are proposed, each stating a hypothesis and the mechanism it changes:

- ``agentic`` mode: a capable model reads what it chooses (LIST / READ / GREP over the workspace, SQL over
  the trace store) and answers with the new harness;
- ``single-call`` mode: a budgeted selection of the workspace (render.py) in one prompt per candidate,
  all candidates answered as one batch; what did not fit is listed at the end of the prompt.

Each answer becomes a draft in a worktree of the harness it copied (``PARENT:``, any frontier member;
default the iteration's parent), so the candidate's commit has that program as its parent. An answer
whose code does not parse or lacks the interface gets one repair call; one that still fails, or changes
only constants, is rejected with the reason. The core then does the rest for every candidate alike:
sandboxed import check, leakage audits (the task ids and gold answers shown in the workspace are
forbidden, and so is code that reads a task's gold or seed), a sandboxed smoke episode, the staged
evaluation and the Pareto frontier over score and context tokens.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from evolver import GenRequest, Message, Proposer, Tools

from evolver_metaharness.answer import FORMAT, Answer, only_constants_changed, parse_answer
from evolver_metaharness.render import render
from evolver_metaharness.workspace import export, workspace_root

SYSTEM = ("You improve the harness of an AI agent: the Python code between a language model and a task, which "
          "builds the model's context, offers tools, turns model output into actions, keeps memory and decides "
          "when to stop. Read how the current harnesses fail in the traces, form a hypothesis about the cause, "
          "and write a new harness that changes one mechanism to fix it (not just a constant). The harness must "
          "work on tasks it has never seen: never write task ids, seeds or gold answers into it.")
AGENT_TOOLS = ("You work in a folder holding the whole search so far (start with README.md and summary.md). "
               "Tools, one per message, on a line of its own:\n{tools}\nRead the traces of failures before you "
               "decide. When ready, give your answer.")


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["single-call", "agentic"] = "single-call"
    """single-call: a budgeted selection of the workspace in one prompt per candidate (any model);
    agentic: the model reads the workspace and the trace store through tools (capable models)."""
    prompt_budget: int = 6000
    """Tokens of evidence in a single-call prompt (the interface, the harness to copy and the answer
    format come on top); what does not fit is listed by path at the end of the prompt."""
    agent_turns: int = 16
    """Tool calls allowed to the agentic proposer before it must answer."""
    answer_tokens: int = 3000
    """Output budget of the call that writes the harness (a whole module)."""
    allow_constant_changes: bool = False
    """Accept candidates that change only literal values; off by default, since each proposal should
    change a mechanism."""
    workspace: str | None = None
    """Where the workspace is written (default ``<store>/metaharness/<run id>``)."""


class MetaHarnessProposer(Proposer):
    def __init__(self, run, **options):
        self.run = run
        self.options = Options(**options)

    # -- the entry point ---------------------------------------------------------------------------
    def propose(self, ctx) -> list:
        run = self.run
        root = workspace_root(run, self.options.workspace)
        run.status = f"iteration {ctx.iteration}: meta-harness exporting its workspace"
        ws = export(run, root)
        run.log(f"meta-harness workspace {root}: {len(ws.candidates)} candidates, {len(ws.traces)} traces")
        if self._budget_spent():
            run.log("meta-harness: proposer token budget spent, no proposals")
            return []
        parents = {m.program_id for m in ctx.frontier.members} | {ctx.parent.id}
        run.status = f"iteration {ctx.iteration}: meta-harness proposing {ctx.n} harnesses ({self.options.mode})"
        if self.options.mode == "agentic":
            results = [self._agentic(ctx, root, k) for k in range(ctx.n)]
        else:
            results = self._single_call(ctx, ws)
        drafts = []
        for k, (answer, info) in enumerate(results):
            parent_id = answer.parent if answer.parent in parents else ctx.parent.id
            if parent_id != ctx.parent.id and not answer.problem and not self.options.allow_constant_changes \
                    and only_constants_changed(self._parent_code(parent_id), answer.code):
                answer.problem = "the code changes only constants, not a mechanism"
            detail = {"mechanism": answer.mechanism, "copied": parent_id, "workspace": str(root),
                      "raw": info.pop("raw", "")[-4000:], **info}
            if answer.parent and answer.parent not in parents:
                detail["parent_note"] = f"asked for {answer.parent!r}, not a frontier member: used {parent_id}"
            draft = ctx.new_draft("harness", answer.hypothesis or "(no hypothesis)", parent_id=parent_id,
                                  detail=detail)
            # Everything the workspace showed is off limits in the code (the core's audit enforces it).
            draft.forbidden = list(ws.forbidden)
            draft.forbidden_sequences = list(ws.forbidden_sequences)
            if answer.problem:
                draft.reject(f"meta-harness: {answer.problem}")
            else:
                (Path(draft.path) / "harness").mkdir(exist_ok=True)
                (Path(draft.path) / "harness" / "harness.py").write_text(answer.code)
            drafts.append(draft)
        return drafts

    def _budget_spent(self) -> bool:
        return self.run.proposer_tokens() >= self.run.config.loop.max_proposer_tokens

    def _parent_code(self, program_id: str) -> str:
        return self.run.repo.files(program_id).get("harness/harness.py", "")

    # -- single-call -------------------------------------------------------------------------------
    def _single_call(self, ctx, ws) -> list[tuple[Answer, dict]]:
        backend = self.run.backend("proposer")
        parent_code = self._parent_code(ctx.parent.id)
        load = lambda ids: self.run.store.episodes(ids=ids, with_steps=True)  # noqa: E731
        prompts, infos = [], []
        for k in range(ctx.n):
            note = (f"You are writing candidate {k + 1} of {ctx.n} this iteration: change a different mechanism "
                    "than the other candidates would (for example not the one the first failure suggests)."
                    if k else "")
            shown = render(ws, ctx.parent.id, parent_code, ctx.frontier, self.run.config.loop.failure_threshold,
                           self.options.prompt_budget, backend.count_tokens, FORMAT, load=load, focus=k, note=note)
            prompts.append([Message("system", SYSTEM), Message("user", shown.text)])
            infos.append({"traces_shown": len(shown.shown), "traces_left_out": len(shown.left_out),
                          "summary_rows_left_out": shown.summary_rows_left_out})
        texts = self._generate(prompts)
        answers = [parse_answer(t, parent_code, self.options.allow_constant_changes) for t in texts]
        retry = [k for k, a in enumerate(answers) if a.problem and a.repairable]
        if retry and not self._budget_spent():  # one repair each, all in one batch
            fixed = self._generate([prompts[k] + [Message("assistant", texts[k]), Message(
                "user", f"Your answer cannot be used: {answers[k].problem}. Answer again, in the format.")]
                for k in retry])
            for k, text in zip(retry, fixed):
                texts[k] = text
                answers[k] = parse_answer(text, parent_code, self.options.allow_constant_changes)
                infos[k]["repaired"] = True
        return [(a, {**info, "raw": t}) for a, info, t in zip(answers, infos, texts)]

    def _generate(self, conversations: list[list[Message]]) -> list[str]:
        rc = self.run.config.role("proposer")
        reqs = [GenRequest(messages=m, max_tokens=self.options.answer_tokens,
                           # Greedy decoding would make the k candidates identical: sample the later ones.
                           temperature=rc.temperature if (rc.temperature > 0 or k == 0) else 0.7,
                           seed=1000 * max(self.run.iteration, 0) + k) for k, m in enumerate(conversations)]
        results = self.run.backend("proposer").generate(reqs)
        return [r.text if not r.error else f"(the model call failed: {r.error})" for r in results]

    # -- agentic -----------------------------------------------------------------------------------
    def _agentic(self, ctx, root: Path, k: int) -> tuple[Answer, dict]:
        tools = Tools(root, self.run.store, max_chars=8000)
        rc = self.run.config.role("proposer")
        others = "" if k == 0 else f" You are writing candidate {k + 1} of {ctx.n}: try a different mechanism."
        messages = [Message("system", SYSTEM + "\n\n" + AGENT_TOOLS.format(tools=tools.help()) + "\n\n" + FORMAT),
                    Message("user", f"Run {self.run.id}, iteration {ctx.iteration}. The harness to improve is "
                                    f"candidates/{ctx.parent.id}/harness/harness.py (frontier: "
                                    f"{', '.join(ctx.frontier.ids())}).{others}")]
        parent_code = self._parent_code(ctx.parent.id)

        def status(turn: int, line: str) -> None:
            self.run.status = f"iteration {ctx.iteration}: meta-harness {k + 1}/{ctx.n} turn {turn + 1}: {line[:60]}"
        done = lambda text: "```" in text and "HYPOTHESIS" in text.upper()  # noqa: E731
        conv = Tools.converse(self.run.backend("proposer"), messages, tools, self.options.agent_turns, done,
                              max_tokens=max(self.options.answer_tokens, rc.max_tokens), temperature=rc.temperature,
                              may_continue=lambda: not self._budget_spent(), on_turn=status)
        answer = parse_answer(conv.answer, parent_code, self.options.allow_constant_changes)
        text = conv.answer
        if answer.problem and answer.repairable and not self._budget_spent():
            text = self._generate([messages + [Message("assistant", conv.answer), Message(
                "user", f"Your answer cannot be used: {answer.problem}. Answer again, in the format.")]])[0]
            answer = parse_answer(text, parent_code, self.options.allow_constant_changes)
        return answer, {"tool_calls": conv.tool_calls, "raw": text}
