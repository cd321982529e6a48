"""A backend that answers from a script: for tests and deterministic demos, no model involved.

Answers come from a queue (in order) and, once it is empty, from ``rule(request)``. Every request
is recorded in ``self.calls`` so a test can check exactly what a harness sent to the model.
Token counts are word counts: deterministic and independent of any tokenizer.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable

from evolver.backends.base import Backend
from evolver.types import ChoiceRequest, ChoiceResult, GenRequest, GenResult


class ScriptExhausted(AssertionError):
    """The test asked for more answers than it scripted: a bug in the test, so fail loudly."""


class ScriptedBackend(Backend):
    name = "scripted"

    def __init__(self, answers: list[str | GenResult] | None = None,
                 rule: Callable[[GenRequest], str | GenResult] | None = None, model: str = "scripted",
                 latency_s: float = 0.0, context_window: int | None = None, **_: Any):
        """``answers`` may hold ready-made ``GenResult``s (e.g. to inject a per-request error).
        ``latency_s``: each call sleeps this long, whatever its batch size (a model's batched step, for
        measuring what surrounds the model: ``bench/cluster_scaling.py``)."""
        self.latency_s = latency_s
        if context_window:  # declared like a model's: the harness budgets its text from it
            self.context_window = int(context_window)
        self.answers: deque[str | GenResult] = deque(answers or [])
        self.rule = rule
        self.model = model
        self.calls: list[GenRequest] = []
        self.choice_calls: list[ChoiceRequest] = []

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        if self.latency_s and not self._in_call:
            time.sleep(self.latency_s)
        return [self._answer(req) for req in requests]

    def _answer(self, req: GenRequest) -> GenResult:
        self.calls.append(req)
        if self.answers:
            answer = self.answers.popleft()
        elif self.rule is not None:
            answer = self.rule(req)
        else:
            last = req.messages[-1].content[:80] if req.messages else ""
            raise ScriptExhausted(f"ScriptedBackend ran out of answers after {len(self.calls) - 1} calls "
                                  f"(unanswered prompt ends: {last!r})")
        if isinstance(answer, GenResult):
            return answer
        text = _cut_at_stop(str(answer), req.stop)
        return GenResult(text=text, prompt_tokens=self._prompt_tokens(req), completion_tokens=self.count_tokens(text))

    _in_call = False

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        """With a rule that names one of the options, pick it; otherwise generate and match."""
        if self.latency_s:
            time.sleep(self.latency_s)
        self._in_call = True  # one call's latency, however many generations it makes
        try:
            return self._choose(requests)
        finally:
            self._in_call = False

    def _choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        out = []
        for req in requests:
            self.choice_calls.append(req)
            if self.rule is not None and not self.answers:
                probe = GenRequest(messages=req.messages, max_tokens=32)
                pick = self.rule(probe)
                text = pick.text if isinstance(pick, GenResult) else str(pick)
                if text in req.options:
                    self.calls.append(probe)
                    index = req.options.index(text)
                    scores = [1.0 if i == index else 0.0 for i in range(len(req.options))]
                    out.append(ChoiceResult(index=index, scores=scores, prompt_tokens=self._prompt_tokens(probe),
                                            completion_tokens=self.count_tokens(text)))
                    continue
            out.extend(super().choose([req]))
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def _prompt_tokens(self, req: GenRequest) -> int:
        return sum(self.count_tokens(m.content) for m in req.messages)


def _cut_at_stop(text: str, stop: list[str] | None) -> str:
    """Mimic a real backend: the text ends before the first stop string."""
    cuts = [text.find(s) for s in stop or [] if s and s in text]
    return text[:min(cuts)] if cuts else text
