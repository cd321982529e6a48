"""Agentic proposer mode: a capable model gathers its own evidence through tools before answering.

The tools (``evolver.proposer_tools``) read the parent program's files and query the trace store;
the model ends with the ACTION / SKILL / WHY / IDEA answer of single-call mode.
"""
from __future__ import annotations

import re
from pathlib import Path

from evolver import Message, Tools

SYSTEM = ("You improve an AI agent by giving it skills. Investigate its failures with the tools, then "
          "propose ONE skill to create or edit. Tools, one per message, on a line of its own "
          "(paths are relative to the agent's program: prompt.md, skills/<name>/SKILL.md, harness/harness.py):\n"
          "{tools}\nWhen ready, answer:\nACTION: create or edit\nSKILL: <skill-name>\nWHY: <failure pattern>\n"
          "IDEA: <what the skill says>")


def ask(proposer, ctx, failures, skills) -> str:
    tools = Tools(Path(ctx.parent.root), proposer.run.store)
    summary = "\n".join(f"- episode {e.id[:8]} ({e.task.category}) score {e.score:.2f}" for e in failures[:10])
    messages = [Message("system", SYSTEM.format(tools=tools.help())),
                Message("user", f"Run {proposer.run.id}, iteration {ctx.iteration}, parent program {ctx.parent.id}.\n"
                                f"Failed training episodes:\n{summary}\nExisting skills: "
                                f"{', '.join(s.name for s in skills) or '(none)'}")]
    rc = proposer.run.config.role("proposer")
    done = lambda text: bool(re.search(r"^\W*ACTION\W*:", text, flags=re.IGNORECASE | re.MULTILINE))  # noqa: E731
    return Tools.converse(proposer.run.backend("proposer"), messages, tools, proposer.options.agent_turns, done,
                          max_tokens=rc.max_tokens, temperature=rc.temperature).answer
