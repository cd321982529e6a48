"""Draft tokens for a decoding row, checked by the model in the same forward as its next token.

A draft costs a forward nothing when the model agrees with it (its tokens come out of one forward
instead of one forward each) and only the compute of its columns when it does not; the reply is
exactly what decoding one token per forward gives either way. Two sources:

- ``PromptLookup``: what followed the reply's last tokens earlier in the prompt ("prompt lookup
  decoding"): an agent's reply copies its context (an action from the listed valid actions, a name).
- ``OptionDrafts``: the replies a request says are likely (``GenRequest.drafts``, e.g. a choice's
  options when the model writes one): the rest of the option the reply so far is the start of.
  Prompt lookup can only guess which "examine ..." of a listed set is meant (it takes the latest
  one listed); the options name every continuation.
"""
from __future__ import annotations

from os.path import commonprefix


class PromptLookup:
    """What followed the latest earlier occurrence of the reply's last 3 tokens (else 2, else 1) in
    the prompt and the reply so far. Positions are indexed by token, so a draft costs a few
    comparisons, not a scan of the prompt."""

    def __init__(self, prompt: list[int]):
        self.seq: list[int] = []
        self.n_prompt = len(prompt)
        self.where: dict[int, list[int]] = {}
        self._extend(prompt)

    def _extend(self, tokens) -> None:
        for tok in tokens:
            self.where.setdefault(tok, []).append(len(self.seq))
            self.seq.append(tok)

    def draft(self, reply: list[int], k: int) -> list[int]:
        self._extend(reply[len(self.seq) - self.n_prompt:])
        seq, end = self.seq, len(self.seq)
        if k <= 0:
            return []
        for n in (3, 2, 1):
            if end <= n:
                continue
            tail = seq[end - n:]
            for i in reversed(self.where[tail[-1]]):  # i: where an occurrence ends, latest first
                if i < end - 1 and i >= n - 1 and seq[i - n + 1:i + 1] == tail:
                    return seq[i + 1:i + 1 + k]
        return []


class OptionDrafts:
    """The rest of the likely replies (token ids each) that the reply so far begins: all of it
    when one is left, else the part they share, else the first one's; prompt lookup once the reply
    has left every option (a reply in other words, or one that goes on past its option)."""

    def __init__(self, prompt: list[int], options: list[list[int]]):
        self.options = [o for o in options if o]
        self.fallback = PromptLookup(prompt)

    def draft(self, reply: list[int], k: int) -> list[int]:
        n = len(reply)
        rests = [o[n:] for o in self.options if len(o) > n and o[:n] == reply]
        if not rests or k <= 0:
            return self.fallback.draft(reply, k)
        return (commonprefix(rests) or rests[0])[:k]  # (commonprefix works on any sequences)
