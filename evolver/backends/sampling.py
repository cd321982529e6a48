"""Sampled play: any backend, sampled at a temperature, every request with a seed of its own.

Harnesses ask greedy (temperature 0), so an evaluation is one deterministic episode per task. A
:class:`SampledBackend` around the executor makes the same program play *sampled* episodes instead:
several per task for a paired test that sees the policy's spread, or N independent tries of the seed
program for the best-of-N baseline, or RL rollouts (``evolver_grpo``'s ``RolloutBackend`` is this class).

Seeds, so a rerun repeats its samples whatever else shares the batch:
- In the evaluator (``seeded_by_episode``), each request carries a seed derived from its episode
  (episode seed, task, step); the wrapper mixes it with its own ``seed``. Two programs that show the
  model the same prompt at the same step of the same task and episode seed get the same sample:
  common random numbers, which is what a paired comparison wants.
- A request that comes without one (a call from outside the evaluator) gets ``seed * 1_000_003 + n``,
  ``n`` counting requests since construction or :meth:`reseed` (so it depends on the call order).

Choices: a written choice (``ChoiceRequest.write``, and every choice when the inner backend cannot
score options) is written by a sampled generation and matched to the nearest option, so sampling
changes what is written; a ranked choice (an inner backend that scores options) is drawn from
``softmax(scores / temperature)`` over the options' mean token log-probs, with the request's seed.

Cache: ``model`` names the temperature (and the wrapper's seed), so a sampled episode never stands
in for a greedy one with the same episode seed, nor for one sampled at another temperature.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from evolver.backends.base import Backend, Lowered
from evolver.types import ChoiceRequest, ChoiceResult, GenRequest, GenResult, stable_hash


class SampledBackend(Backend):
    """``inner`` played at ``temperature``, every request with a seed of its own (see the module docstring)."""

    name = "sampled"
    scores_options = False  # a written choice is sampled through :meth:`generate`
    #: The evaluator sets each request's seed from its episode for a backend with this flag.
    seeded_by_episode = True

    def __init__(self, inner: Backend, temperature: float, seed: int = 0, max_tokens: int | None = None,
                 logprobs: bool = False):
        self.inner, self.temperature, self.seed = inner, temperature, seed
        self.max_tokens, self.logprobs = max_tokens, logprobs
        self.calls = 0

    @property
    def model(self) -> str:  # type: ignore[override]
        extra = (f",seed={self.seed}" if self.seed else "") + (f",max={self.max_tokens}" if self.max_tokens else "")
        return f"{self.inner.model}~sampled(t={self.temperature:g}{extra})"

    @property
    def base_model(self) -> str:
        return self.inner.base_model

    @property
    def choice_stop(self) -> list[str] | None:  # type: ignore[override]
        return getattr(self.inner, "choice_stop", ["\n"])

    def reseed(self, seed: int) -> None:
        """Seeds from here on are ``seed``-derived (and the request counter starts again)."""
        self.seed, self.calls = seed, 0

    def request_seed(self, given: int | None) -> int:
        """The seed one request is sampled with (see the module docstring)."""
        self.calls += 1
        if given is None or not self.seeded_by_episode:
            return self.seed * 1_000_003 + self.calls
        return int(stable_hash("sampled", self.seed, given), 16) % 2 ** 31

    def sampled(self, request: GenRequest) -> GenRequest:
        """``request`` as this wrapper sends it to ``inner``: at its temperature, with its seed."""
        return dataclasses.replace(request, temperature=self.temperature, seed=self.request_seed(request.seed),
                                   logprobs=self.logprobs or request.logprobs,
                                   max_tokens=self.max_tokens or request.max_tokens)

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        return self.inner.generate([self.sampled(r) for r in requests])

    def writes_choices(self, requests: list[ChoiceRequest]) -> bool:
        return not getattr(self.inner, "scores_options", False) or all(r.write for r in requests)

    def lowered(self, requests: list) -> Lowered | None:
        if all(isinstance(r, GenRequest) for r in requests):
            gens, finish = list(requests), None
        elif self.writes_choices(requests):
            gens, finish = self.written_requests(requests), functools.partial(self.match_written, requests)
        else:
            return None
        low = self.inner.lowered([self.sampled(r) for r in gens])
        if low is None or finish is None:
            return low
        return Lowered(low.engine, low.gens, lambda results: finish(low.finish(results)))

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        if not getattr(self.inner, "scores_options", False):
            return self.choose_by_writing(requests)
        return self.written_apart(requests, self._draw_ranked)

    def _draw_ranked(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        results = self.inner.choose(requests)
        for req, res in zip(requests, results):
            scores = np.asarray(res.scores, dtype=float)
            if res.error or scores.size < 2 or not np.isfinite(scores).any():
                continue
            logits = np.where(np.isfinite(scores), scores, -np.inf) / self.temperature
            p = np.exp(logits - logits.max())
            res.index = int(np.random.default_rng(self.request_seed(req.seed)).choice(scores.size, p=p / p.sum()))
        return results

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def close(self) -> None:
        pass  # the inner backend belongs to whoever made it
