"""Budgets a run cannot exceed: tokens and model requests, in total and per role (``[budget]``).

Every model request of a run goes through :class:`evolver.models.CountingBackend`, which asks the run's
:class:`Ledger` before sending a batch. The ledger holds what was spent and what is in flight, each
request counted at its most: its prompt by the backend's tokenizer plus a chat template's share per
message, and its reply at ``max_tokens`` (a choice at the longest option, or at the most a written
choice may take). A batch that could take a total or a role past a cap is refused with
:class:`BudgetExceeded` before anything is sent; when it returns, its reservation gives way to what it
really spent. So the tokens a run stores never exceed the cap, whatever is in flight.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from evolver.backends.base import WRITTEN_CHOICE_TOKENS
from evolver.errors import EvolverError
from evolver.types import ChoiceRequest

TEMPLATE_TOKENS = 16  # a chat template's tokens around one message (role markers, separators), at most


class BudgetExceeded(EvolverError):
    """A request that could cross a ``[budget]`` cap was refused; the run stops where it is."""


def most_tokens(backend, request) -> int:
    """The most tokens ``request`` can spend on ``backend``: prompt (by its tokenizer, plus the template's
    share per message) and reply."""
    prompt = sum(backend.count_tokens(m.content or "") + TEMPLATE_TOKENS for m in request.messages) + TEMPLATE_TOKENS
    if isinstance(request, ChoiceRequest):
        longest = max((backend.count_tokens(o) for o in request.options), default=0)
        return prompt + max(WRITTEN_CHOICE_TOKENS, longest + 4)
    return prompt + int(getattr(request, "max_tokens", 0) or 0)


@dataclass
class Ledger:
    """Spend and reservations of one run against its caps (a :class:`evolver.config.BudgetConfig`)."""

    caps: object
    spent: dict = field(default_factory=dict)  # role -> [tokens, calls]
    held: dict = field(default_factory=dict)  # role -> [tokens, calls] in flight, at their most
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def reserve(self, role: str, tokens: int, calls: int) -> None:
        """Hold ``tokens`` and ``calls`` for ``role``, or raise :class:`BudgetExceeded` (nothing held)."""
        with self._lock:
            checks = [("", self.caps)] + ([(role, self.caps.roles[role])] if role in self.caps.roles else [])
            for who, cap in checks:
                for i, (name, limit) in enumerate((("tokens", cap.tokens), ("calls", cap.calls))):
                    if limit is None:
                        continue
                    used = self._total(self.spent, who, i) + self._total(self.held, who, i)
                    need = (tokens, calls)[i]
                    if used + need > limit:
                        scope = f"budget.roles.{who}.{name}" if who else f"budget.{name}"
                        raise BudgetExceeded(
                            f"{scope} = {limit}: {used} spent or in flight, and the next {role} request(s) could "
                            f"take {need} more; the run stops here (raise {scope} to go on; `evolver run "
                            "--resume` continues)")
            h = self.held.setdefault(role, [0, 0])
            h[0] += tokens
            h[1] += calls

    def settle(self, role: str, held_tokens: int, held_calls: int, tokens: int, calls: int) -> None:
        """A reservation returned: it gives way to what it spent."""
        with self._lock:
            h = self.held.setdefault(role, [0, 0])
            h[0] -= held_tokens
            h[1] -= held_calls
            s = self.spent.setdefault(role, [0, 0])
            s[0] += tokens
            s[1] += calls

    @staticmethod
    def _total(table: dict, who: str, i: int) -> int:
        return sum(v[i] for r, v in table.items() if not who or r == who)

    def limited(self) -> bool:
        caps = [self.caps] + list(self.caps.roles.values())
        return any(c.tokens is not None or c.calls is not None for c in caps)
