"""The surrogate verifier of EvoSkills (co-evolutionary verification), as an option of EvoSkill.

Information isolation: the verifier sees only the task and what the candidate's agent produced (its
actions and the environment's answers), never the builder's reasoning or the skill itself. It writes
assertions, which are checked deterministically:

    ASSERT: <text the transcript must contain>
    ASSERT NOT: <text the transcript must not contain>

A candidate whose replays on its own failure tasks fail an assertion goes back to the builder once,
with the failed assertions as diagnostics; if it still fails, it is rejected before any true
evaluation is spent. A candidate that passes goes on to the true grader (the core's dev evaluation),
which answers only pass/fail. When the surrogate passed but the grader did not admit the candidate,
the next verifier call is told so (one bit) and asked for stronger assertions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from evolver import Episode, GenRequest, Message, Program, ProgramRepo, run_episodes

PROMPT = ("You check an AI agent's work. Below is a task and what the agent did. Write 1 to 4 assertions a "
          "correct solution must satisfy, one per line, as\nASSERT: <text the transcript must contain>\n"
          "ASSERT NOT: <text the transcript must not contain>\n\nTask:\n{task}\n\nTranscript:\n{transcript}\n"
          "{escalate}\nAssertions:\n")
ESCALATE = ("Earlier assertions of yours passed on work that the real grader then failed: "
            "write stricter ones.\n")


@dataclass
class Verdict:
    passed: bool
    failed: list[str]
    assertions: list[tuple[bool, str]]


def transcript(ep: Episode, max_chars: int = 1500) -> str:
    lines = [f"> {s.action}\n{s.observation.strip()}" for s in ep.steps if not s.tool_calls]
    text = "\n".join(lines)
    return text if len(text) <= max_chars else "[... earlier steps cut ...]\n" + text[-max_chars:]


def parse_assertions(text: str) -> list[tuple[bool, str]]:
    out = []
    for m in re.finditer(r"^\W*ASSERT(\s+NOT)?\s*:\s*(.+?)\s*$", text, flags=re.IGNORECASE | re.MULTILINE):
        needle = m.group(2).strip().strip('"').strip("'")
        if needle:
            out.append((m.group(1) is None, needle))
    return out[:4]


def check(assertions: list[tuple[bool, str]], text: str) -> list[str]:
    low = text.lower()
    return [f"{'ASSERT' if must else 'ASSERT NOT'}: {needle}" for must, needle in assertions
            if (needle.lower() in low) != must]


class SurrogateVerifier:
    def __init__(self, run, max_tasks: int = 2):
        self.run, self.max_tasks = run, max_tasks

    def replay(self, draft, failures: list[Episode]) -> list[Episode]:
        """Play the candidate (still a draft: files in its worktree) on the failures it was built from."""
        root = Path(draft.path)
        program = Program(f"{draft.candidate_id}~verify", "", str(root), ProgramRepo.content_hash(root), {})
        tasks = [e.task for e in failures[: self.max_tasks]]
        return run_episodes(self.run.context(program), self.run.benchmark, self.run.backend("executor"), tasks,
                            seed=self.run.config.loop.episode_seed, purpose="verify", store=self.run.store,
                            run=self.run)

    def assertions(self, episodes: list[Episode], escalate: bool) -> list[list[tuple[bool, str]]]:
        requests = [GenRequest([Message("user", PROMPT.format(task=e.task.prompt.strip()[:1200],
                                                               transcript=transcript(e),
                                                               escalate=ESCALATE if escalate else ""))],
                               max_tokens=120) for e in episodes]
        return [parse_assertions(r.text) for r in self.run.backend("judge").generate(requests)]

    def verify(self, draft, failures: list[Episode], escalate: bool = False) -> Verdict:
        episodes = self.replay(draft, failures)
        failed, every = [], []
        for ep, asserts in zip(episodes, self.assertions(episodes, escalate)):
            every += asserts
            failed += check(asserts, transcript(ep)) if asserts else []
        return Verdict(not failed, failed, every)


def surrogate_missed(history: list[dict]) -> bool:
    """The one bit from the true grader: did a surrogate-verified candidate fail to be admitted?"""
    return any((h.get("detail") or {}).get("verified") and h.get("status") == "discarded" for h in history)
