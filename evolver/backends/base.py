"""The model backend interface, shared by every role (executor, proposer, builder, judge).

A backend answers *batches*: the evaluator steps all live episodes in lockstep and hands their
model calls over at once, because batching is the difference between 25 and 400 episodes in five
minutes on a 2-core CPU.

Contract for implementations:
- ``len(generate(reqs)) == len(reqs)``, results in request order; do not mutate the requests.
- A single request's failure (bad output, context overflow) is a ``GenResult`` with ``error`` set
  and ``text == ""``; only systemic failures (model cannot load, server down after retries) raise
  ``BackendError``.
"""
from __future__ import annotations

import abc
import difflib

from evolver.types import ChoiceRequest, ChoiceResult, GenRequest, GenResult, Message


class Backend(abc.ABC):
    name: str = "base"
    #: A string that identifies the weights (e.g. "smollm2-135m-instruct@<hash>"): part of cache keys.
    model: str = ""
    #: True when ``choose`` scores options by log-likelihood rather than generating.
    scores_options: bool = False
    #: Where a written choice ends (the default ``choose`` writes, then matches an option).
    choice_stop: list[str] | None = None

    @abc.abstractmethod
    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        """Answer every request, in order (see the module docstring for the contract)."""

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        """Default: generate a reply, pick the option closest to it (difflib ratio)."""
        gens = self.generate([GenRequest(messages=r.messages, max_tokens=32, stop=self.choice_stop)
                              for r in requests])
        out = []
        for req, gen in zip(requests, gens):
            scores = [difflib.SequenceMatcher(None, gen.text.strip().lower(), o.lower()).ratio()
                      for o in req.options]
            best = max(range(len(scores)), key=scores.__getitem__) if scores else -1
            out.append(ChoiceResult(index=best, scores=scores, prompt_tokens=gen.prompt_tokens,
                                    completion_tokens=gen.completion_tokens, error=gen.error, sample=gen))
        return out

    def count_tokens(self, text: str) -> int:
        """Rough count when no tokenizer is at hand: ~4 characters per token."""
        return max(1, len(text) // 4)

    def close(self) -> None:
        pass


def render_plain(messages: list[Message]) -> str:
    """A readable transcript for backends without a chat template (and for traces)."""
    return "\n\n".join(f"[{m.role}]\n{m.content}" for m in messages)
