"""Agentic proposer mode: a capable model gathers its own evidence through tools before answering.

Tools (one per turn, on its own line):
  SQL <select ...>   read-only query over the trace store (episodes, steps, proposals, evaluations ...)
  READ <path>        a file of the parent program (prompt.md, skills/<name>/SKILL.md, harness/harness.py)
  LIST               the parent program's files
The model ends with the ACTION / SKILL / WHY / IDEA answer of single-call mode.
"""
from __future__ import annotations

import re
from pathlib import Path

from evolver.types import GenRequest, Message

SYSTEM = ("You improve an AI agent by giving it skills. Investigate its failures with the tools, then "
          "propose ONE skill to create or edit. Tools, one per message, on a line of its own:\n"
          "SQL <select query>  (tables: episodes(episode_id, run_id, program_id, task_id, category, split, purpose, "
          "score, prediction, error), steps(episode_id, idx, prompt, output, action, observation, reward), "
          "proposals(operator, hypothesis, status, reason, scores))\nREAD <path>\nLIST\n"
          "When ready, answer:\nACTION: create or edit\nSKILL: <skill-name>\nWHY: <failure pattern>\nIDEA: <what the skill says>")


def run_tool(proposer, ctx, line: str) -> str:
    root = Path(ctx.parent.root)
    if line.upper().startswith("SQL "):
        sql = line[4:].strip().rstrip(";")
        if not re.match(r"(?is)^\s*(select|with)\b", sql) or ";" in sql:
            return "only one SELECT query is allowed"
        try:
            cols, rows = proposer.run.store.query(sql + (" LIMIT 50" if "limit" not in sql.lower() else ""))
        except Exception as exc:
            return f"query failed: {exc}"
        return "\t".join(cols) + "\n" + "\n".join("\t".join(str(v)[:200] for v in r) for r in rows[:50])
    if line.upper().startswith("READ "):
        path = (root / line[5:].strip()).resolve()
        if root.resolve() not in path.parents or not path.is_file():
            return "no such file in the program"
        return path.read_text(errors="replace")[:4000]
    if line.upper().startswith("LIST"):
        return "\n".join(str(p.relative_to(root)) for p in sorted(root.rglob("*"))
                         if p.is_file() and ".git" not in p.parts)
    return ""


def ask(proposer, ctx, failures, skills) -> str:
    summary = "\n".join(f"- episode {e.id[:8]} ({e.task.category}) score {e.score:.2f}" for e in failures[:10])
    messages = [Message("system", SYSTEM),
                Message("user", f"Run {proposer.run.id}, iteration {ctx.iteration}, parent program {ctx.parent.id}.\n"
                                f"Failed training episodes:\n{summary}\nExisting skills: "
                                f"{', '.join(s.name for s in skills) or '(none)'}")]
    backend = proposer.run.backend("proposer")
    rc = proposer.run.config.role("proposer")
    text = ""
    for turn in range(proposer.options.agent_turns + 1):
        text = backend.generate([GenRequest(messages=messages, max_tokens=rc.max_tokens,
                                            temperature=rc.temperature)])[0].text
        if re.search(r"^\W*ACTION\W*:", text, flags=re.IGNORECASE | re.MULTILINE):
            return text
        tool_line = next((ln.strip() for ln in text.splitlines()
                          if re.match(r"(?i)^(SQL|READ|LIST)\b", ln.strip())), "")
        if not tool_line or turn == proposer.options.agent_turns:
            break
        messages += [Message("assistant", text), Message("user", "Result:\n" + run_tool(proposer, ctx, tool_line)[:4000])]
    return text
