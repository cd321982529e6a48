"""Budgets a run cannot exceed: tokens, model requests and cost, in total and per role (``[budget]``).

Every model request of a run goes through :class:`evolver.models.CountingBackend`, which asks the run's
:class:`Ledger` before sending a batch. The ledger holds what was spent and what is in flight, each
request counted at its most: its prompt by the backend's tokenizer plus a chat template's share per
message, and its reply at ``max_tokens`` (a choice at the longest option, or at the most a written
choice may take). A batch that could take a total or a role past a cap is refused with
:class:`BudgetExceeded` before anything is sent; when it returns, its reservation gives way to what it
really spent. So the tokens a run stores never exceed the cap, whatever is in flight. Cost is the same
count at the prices a user sets per model (``budget.prices``, per million prompt and completion tokens).
Every role's spend is kept whether or not a cap is set (:meth:`Ledger.spend`: the run's summary and
its report).
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


def most_parts(backend, request) -> tuple[int, int]:
    """(prompt, reply): the most tokens ``request`` can spend on ``backend``, its prompt by its tokenizer
    plus the template's share per message, and its reply."""
    prompt = sum(backend.count_tokens(m.content or "") + TEMPLATE_TOKENS for m in request.messages) + TEMPLATE_TOKENS
    if isinstance(request, ChoiceRequest):
        longest = max((backend.count_tokens(o) for o in request.options), default=0)
        return prompt, max(WRITTEN_CHOICE_TOKENS, longest + 4)
    return prompt, int(getattr(request, "max_tokens", 0) or 0)


def most_tokens(backend, request) -> int:
    """The most tokens ``request`` can spend on ``backend``: prompt and reply (:func:`most_parts`)."""
    return sum(most_parts(backend, request))


def cost_of(price, prompt: int, completion: int) -> float:
    """What ``prompt`` and ``completion`` tokens cost at ``price`` (a :class:`evolver.config.Price`; None: free)."""
    return 0.0 if price is None else (prompt * price.input + completion * price.output) / 1e6


@dataclass
class Ledger:
    """Spend and reservations of one run against its caps (a :class:`evolver.config.BudgetConfig`): per
    role, ``[tokens, calls, cost]`` spent and in flight."""

    caps: object
    spent: dict = field(default_factory=dict)  # role -> [tokens, calls, cost]
    held: dict = field(default_factory=dict)  # role -> [tokens, calls, cost] in flight, at their most
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def reserve(self, role: str, tokens: int, calls: int, cost: float = 0.0) -> None:
        """Hold ``tokens``, ``calls`` and ``cost`` for ``role``, or raise :class:`BudgetExceeded` (nothing held)."""
        with self._lock:
            checks = [("", self.caps)] + ([(role, self.caps.roles[role])] if role in self.caps.roles else [])
            for who, cap in checks:
                for i, (name, limit) in enumerate((("tokens", cap.tokens), ("calls", cap.calls),
                                                   ("cost", cap.cost))):
                    if limit is None:
                        continue
                    used = self._total(self.spent, who, i) + self._total(self.held, who, i)
                    need = (tokens, calls, cost)[i]
                    if used + need > limit:
                        scope = f"budget.roles.{who}.{name}" if who else f"budget.{name}"
                        shown = (lambda v: f"{v:.4g}") if name == "cost" else (lambda v: str(v))
                        raise BudgetExceeded(
                            f"{scope} = {shown(limit)}: {shown(used)} spent or in flight, and the next {role} "
                            f"request(s) could take {shown(need)} more; the run stops here (raise {scope} to go "
                            "on; `evolver run --resume` continues)")
            h = self.held.setdefault(role, [0, 0, 0.0])
            h[0] += tokens
            h[1] += calls
            h[2] += cost

    def settle(self, role: str, held_tokens: int, held_calls: int, tokens: int, calls: int,
               held_cost: float = 0.0, cost: float = 0.0) -> None:
        """A reservation returned: it gives way to what it spent."""
        with self._lock:
            h = self.held.setdefault(role, [0, 0, 0.0])
            h[0] -= held_tokens
            h[1] -= held_calls
            h[2] -= held_cost
            s = self.spent.setdefault(role, [0, 0, 0.0])
            s[0] += tokens
            s[1] += calls
            s[2] += cost

    def spend(self) -> dict:
        """What each role spent: ``{role: {"tokens", "calls", "cost"}}`` (the store's run summary, the report)."""
        with self._lock:
            return {role: {"tokens": t, "calls": c, "cost": round(x, 6)} for role, (t, c, x) in sorted(self.spent.items())}

    @staticmethod
    def _total(table: dict, who: str, i: int) -> float:
        return sum(v[i] for r, v in table.items() if not who or r == who)

    def limited(self) -> bool:
        caps = [self.caps] + list(self.caps.roles.values())
        return any(c.tokens is not None or c.calls is not None or c.cost is not None for c in caps)
