"""Read-only tools for agentic proposers, and the turn loop that serves them.

A capable proposer model gathers its own evidence before it answers: one tool call per turn, on a line of
its own, answered in the next user message. The tools read one folder (a program checkout, or the
Meta-Harness workspace) and the trace store, and nothing else:

  LIST [dir]              the files under the folder (or one of its sub-folders)
  READ <path>             a file of the folder (the first ``max_chars`` characters)
  GREP <regex> [dir]      matching lines, as path:line: text (at most 60)
  SQL <select ...>        one read-only query over the trace store (at most 50 rows)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from evolver.types import GenRequest, Message

TOOL_LINE = re.compile(r"^(SQL|READ|LIST|GREP)\b", re.IGNORECASE)
STORE_TABLES = ("episodes(episode_id, run_id, program_id, task_id, category, split, purpose, score, prediction, "
                "error), steps(episode_id, idx, prompt, output, action, observation, reward), "
                "proposals(candidate_id, parent_id, operator, hypothesis, status, reason, scores), "
                "evaluations(program_id, split, score, context_tokens, per_category)")


@dataclass
class Conversation:
    """What one agentic exchange produced: the final answer and the tool lines the model used."""

    answer: str
    tool_calls: list[str] = field(default_factory=list)


def converse(backend, messages: list[Message], tools: Tools, turns: int, done: Callable[[str], bool],
             max_tokens: int = 256, temperature: float = 0.0,
             may_continue: Callable[[], bool] = lambda: True,
             on_turn: Callable[[int, str], None] | None = None) -> Conversation:
    """Let the model call tools for up to ``turns`` turns until ``done(reply)``; return its last reply.

    A reply that is neither done nor a tool call ends the exchange (that reply is the answer), and so does
    ``may_continue()`` turning False (e.g. the proposer token budget is spent).
    """
    messages = list(messages)
    used: list[str] = []
    text = ""
    for turn in range(turns + 1):
        text = backend.generate([GenRequest(messages=messages, max_tokens=max_tokens,
                                            temperature=temperature)])[0].text
        if done(text):
            break
        tool_line = next((ln.strip() for ln in text.splitlines() if TOOL_LINE.match(ln.strip())), "")
        if not tool_line or turn == turns or not may_continue():
            break
        used.append(tool_line)
        if on_turn:
            on_turn(turn, tool_line)
        messages += [Message("assistant", text), Message("user", "Result:\n" + tools.run(tool_line)[: tools.max_chars])]
    return Conversation(text, used)


@dataclass
class Tools:
    """The read-only LIST / READ / GREP tools over ``root``, and SQL over ``store`` when given (module docstring)."""

    #: ``Tools.converse(backend, messages, tools, turns, done)``: an agentic exchange with these tools.
    converse = staticmethod(converse)

    root: Path
    store: Any = None  # evolver.store.Store; None: no SQL tool
    max_chars: int = 4000

    def help(self) -> str:
        lines = ["LIST [dir]", "READ <path>", "GREP <regex> [dir]"]
        if self.store is not None:
            lines.append(f"SQL <one select query>  (tables: {STORE_TABLES})")
        return "\n".join(lines)

    def run(self, line: str) -> str:
        """The result of one tool line; a bad call gets a message saying what is allowed, never an error."""
        word, _, rest = line.strip().partition(" ")
        word, rest = word.upper(), rest.strip()
        if word == "SQL" and self.store is not None:
            return self._sql(rest)
        if word == "READ":
            path = self._inside(rest)
            if path is None or not path.is_file():
                return f"no such file: {rest!r} (LIST shows the files)"
            return path.read_text(errors="replace")[: self.max_chars]
        if word == "LIST":
            base = self._inside(rest or ".")
            if base is None or not base.is_dir():
                return f"no such folder: {rest!r}"
            return "\n".join(str(p.relative_to(self.root)) for p in sorted(base.rglob("*"))
                             if p.is_file() and ".git" not in p.parts)
        if word == "GREP":
            return self._grep(rest)
        return f"unknown tool; the tools are:\n{self.help()}"

    def _inside(self, rel: str) -> Path | None:
        root = self.root.resolve()
        path = (root / rel).resolve()
        return path if path == root or root in path.parents else None

    def _sql(self, sql: str) -> str:
        sql = sql.rstrip(";")
        if not re.match(r"(?is)^\s*(select|with)\b", sql) or ";" in sql:
            return "only one SELECT query is allowed"
        try:
            cols, rows = self.store.query(sql + (" LIMIT 50" if "limit" not in sql.lower() else ""))
        except Exception as exc:
            return f"query failed: {exc}"
        return "\t".join(cols) + "\n" + "\n".join("\t".join(str(v)[:200] for v in r) for r in rows[:50])

    def _grep(self, rest: str) -> str:
        pattern, _, where = rest.partition(" ")
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            return f"bad regex {pattern!r}: {exc}"
        base = self._inside(where.strip() or ".")
        if base is None:
            return f"no such folder: {where!r}"
        hits = []
        for path in sorted(base.rglob("*") if base.is_dir() else [base]):
            if not path.is_file() or ".git" in path.parts:
                continue
            for n, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if regex.search(text):
                    hits.append(f"{path.relative_to(self.root)}:{n}: {text[:200]}")
                    if len(hits) >= 60:
                        return "\n".join(hits) + "\n(more matches not shown)"
        return "\n".join(hits) or "(no match)"
