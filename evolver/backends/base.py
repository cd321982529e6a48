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
from typing import Callable, NamedTuple

from evolver.types import ChoiceRequest, ChoiceResult, GenRequest, GenResult, Message

WRITTEN_CHOICE_TOKENS = 32  # the most a written choice may take


class Lowered(NamedTuple):
    """Requests lowered to generations on ``engine`` (see :meth:`Backend.lowered`)."""

    engine: "Backend"
    gens: list[GenRequest]
    finish: Callable[[list[GenResult]], list]


def _same(results: list) -> list:
    return results


def render_plain(messages: list[Message]) -> str:
    """A readable transcript for backends without a chat template (and for traces)."""
    return "\n\n".join(f"[{m.role}]\n{m.content}" for m in messages)


class Backend(abc.ABC):
    """A model that answers batches of generations and choices (see the module docstring for the contract).

    Subclasses implement :meth:`generate`; :meth:`choose` writes and matches unless overridden by a
    backend that scores options. A local backend may add ``tokenizer``, ``load_weights(state, model_id)``
    and token ids / log-probs in its results (``GenRequest.logprobs``); trainers use those."""

    name: str = "base"
    #: A string that identifies the weights (e.g. "smollm2-135m-instruct@<hash>"): part of cache keys.
    model: str = ""
    #: True when ``choose`` scores options by log-likelihood rather than generating.
    scores_options: bool = False
    #: Where a written choice ends (the default ``choose`` writes, then matches an option): options
    #: are one line (actions, answers).
    choice_stop: list[str] | None = ["\n"]
    #: ``Backend.render_plain(messages)``: a readable transcript for a model without a chat template.
    render_plain = staticmethod(render_plain)

    @property
    def base_model(self) -> str:
        """The id of the weights the backend was made with, before any training changed ``model``
        (``load_weights``): trainers name the versions they train after it. ``model`` for a backend
        whose weights never change."""
        return self.model

    @abc.abstractmethod
    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        """Answer every request, in order (see the module docstring for the contract)."""

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        """Default: write a reply, pick the option closest to it (see :meth:`choose_by_writing`)."""
        return self.choose_by_writing(requests)

    def choose_by_writing(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        """Generate a reply per request (one batch), pick the option closest to it (difflib ratio).

        The reply may run a few tokens past the longest option, no further: more text cannot match
        any option better, and every token is a decoding step for the whole batch."""
        return self.match_written(requests, self.generate(self.written_requests(requests)))

    def written_requests(self, requests: list[ChoiceRequest]) -> list[GenRequest]:
        """The generations that write the replies of :meth:`choose_by_writing`."""
        return [GenRequest(messages=r.messages, max_tokens=self._written_budget(r.options),
                           stop=self.choice_stop, drafts=list(r.options), seed=r.seed) for r in requests]

    @staticmethod
    def match_written(requests: list[ChoiceRequest], gens: list[GenResult]) -> list[ChoiceResult]:
        """Each written reply matched to its request's nearest option."""
        out = []
        for req, gen in zip(requests, gens):
            scores = [difflib.SequenceMatcher(None, gen.text.strip().lower(), o.lower()).ratio()
                      for o in req.options]
            best = max(range(len(scores)), key=scores.__getitem__) if scores else -1
            out.append(ChoiceResult(index=best, scores=scores, prompt_tokens=gen.prompt_tokens,
                                    completion_tokens=gen.completion_tokens, error=gen.error, sample=gen))
        return out

    def lowered(self, requests: list) -> Lowered | None:
        """``requests`` (all generations, or all choices) as plain generations on the backend at the
        bottom of any wrappers, so the evaluator can answer the requests of several backends that share
        it (a greedy and a sampled player of the same weights) in ONE batch: ``(engine, gens, finish)``,
        where ``finish(engine.generate(gens))`` is what this backend would have answered. None when
        they cannot be lowered (options scored by likelihood): the evaluator then calls this backend.

        Default: generations go to this backend's own :meth:`generate`; choices are lowered only by a
        backend whose ``choose`` writes them (:attr:`writes_choices`)."""
        if all(isinstance(r, GenRequest) for r in requests):
            return Lowered(self, list(requests), _same)
        if self.writes_choices(requests):
            return Lowered(self, self.written_requests(requests), lambda gens: self.match_written(requests, gens))
        return None

    def writes_choices(self, requests: list[ChoiceRequest]) -> bool:
        """Whether :meth:`choose` answers these by :meth:`choose_by_writing`: true of the default
        ``choose``; a backend that overrides ``choose`` says so itself."""
        return type(self).choose is Backend.choose

    def _written_budget(self, options: list[str]) -> int:
        longest = max((self.count_tokens(o) for o in options), default=WRITTEN_CHOICE_TOKENS)
        return max(1, min(WRITTEN_CHOICE_TOKENS, longest + 4))

    def written_apart(self, requests: list[ChoiceRequest], score) -> list[ChoiceResult]:
        """For a backend that scores options: requests marked ``write`` are answered by
        :meth:`choose_by_writing`, the rest by ``score(requests)``, results in request order."""
        written = [i for i, r in enumerate(requests) if r.write]
        if not written:
            return score(requests)
        out: list[ChoiceResult | None] = [None] * len(requests)
        rest = [i for i, r in enumerate(requests) if not r.write]
        for idx, results in ((written, self.choose_by_writing([requests[i] for i in written])),
                             (rest, score([requests[i] for i in rest]) if rest else [])):
            for i, res in zip(idx, results):
                out[i] = res
        return out  # type: ignore[return-value]

    def count_tokens(self, text: str) -> int:
        """Rough count when no tokenizer is at hand: ~4 characters per token."""
        return max(1, len(text) // 4)

    def close(self) -> None:
        pass

