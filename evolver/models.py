"""The models a run plays and proposes with: one backend per (backend, model, options) shared by the roles
that name it, trained checkpoints loaded on demand (the two most recent stay loaded), and the tokens each
role spends. :class:`evolver.Run` holds one and forwards ``backend``, ``executor_for`` and ``checkpoint_of``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from evolver import plugins
from evolver.backends.base import Backend, Lowered
from evolver.budget import Ledger, cost_of, most_parts
from evolver.config import Config
from evolver.types import GenRequest, GenResult, Program


def checkpoint_path(workspace: Path, model: str | None) -> str | None:
    """A manifest's ``model`` as a loadable weights folder (relative paths are in the workspace), or
    None: no model, a backend's model name ("embedded", a hub id) or a folder that is not there."""
    if not model or model == "embedded":
        return None
    path = Path(model) if Path(model).is_absolute() else Path(workspace) / model
    return str(path.resolve()) if (path / "config.json").is_file() else None


class CountingBackend(Backend):
    """Wraps a backend to count the tokens a role spends (for the report) and, with a ``ledger``
    (:class:`evolver.budget.Ledger`), its spend at ``price``; a ledger that has caps refuses a batch that
    could cross one."""

    def __init__(self, inner: Backend, counter: dict, role: str, ledger: Ledger | None = None, price=None):
        self.inner, self.counter, self.role, self.ledger, self.price = inner, counter, role, ledger, price
        self.capped = ledger is not None and ledger.limited()
        self.name, self.scores_options = inner.name, inner.scores_options

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.inner.model  # follows the weights a trainer loads (load_weights changes it)

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        held = self._reserve(requests)
        return self._count(self.inner.generate(requests), held)

    def choose(self, requests):
        held = self._reserve(requests)
        return self._count(self.inner.choose(requests), held)

    def lowered(self, requests: list) -> Lowered | None:
        low = self.inner.lowered(requests)
        if low is None:
            return None
        held = self._reserve(requests)
        return Lowered(low.engine, low.gens, lambda results: self._count(low.finish(results), held))

    def _reserve(self, requests: list) -> tuple[int, int, float]:
        if not self.capped or not requests:
            return (0, 0, 0.0)
        parts = [most_parts(self.inner, r) for r in requests]
        prompt, reply = sum(p for p, _ in parts), sum(r for _, r in parts)
        held = (prompt + reply, len(requests), cost_of(self.price, prompt, reply))
        self.ledger.reserve(self.role, *held)
        return held

    def _count(self, results: list, held: tuple[int, int, float] = (0, 0, 0.0)) -> list:
        prompt, completion = sum(r.prompt_tokens for r in results), sum(r.completion_tokens for r in results)
        self.counter[self.role] = self.counter.get(self.role, 0) + prompt + completion
        if self.ledger is not None:
            self.ledger.settle(self.role, held[0], held[1], prompt + completion, len(results), held[2],
                               cost_of(self.price, prompt, completion))
        return results

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    @property
    def base_model(self) -> str:
        return self.inner.base_model

    def __getattr__(self, name: str) -> Any:  # tokenizer, hf_model, load_weights, ...
        return getattr(self.inner, name)


def _remote(backend: Backend, name: str, model: str | None, options: dict) -> Backend:
    """How a cluster worker makes the same backend (:func:`evolver.remote.describe`), and the weights it was
    made with (a trainer that changes them in place changes ``model``)."""
    try:
        backend.remote_spec = {"backend": name, "model": model, "options": dict(options), "made_as": backend.model}
    except AttributeError:  # a backend with __slots__ or a read-only attribute: it plays only here
        pass
    return backend


class Models:
    """The backend pool of one run (see the module docstring)."""

    def __init__(self, config: Config, workspace: Path, tokens: dict[str, int]):
        self.config, self.workspace, self.tokens = config, Path(workspace), tokens
        self._backends: dict[tuple, Backend] = {}
        self.ledger = Ledger(config.budget)

    def backend(self, role: str) -> Backend:
        """The backend for a role. Roles that name the same backend and model share one instance
        (one copy of the weights in memory)."""
        rc, key = self.config.role(role), self._role_key(role)
        if key not in self._backends:
            self._backends[key] = _remote(plugins.make("backend", rc.backend, model=rc.model, **rc.options),
                                          rc.backend, rc.model, rc.options)
        return CountingBackend(self._backends[key], self.tokens, role, self.ledger, self.price(role))

    def checkpoint_of(self, program: Program) -> str | None:
        """The weights folder a program's manifest names (``model``: a trained checkpoint, relative
        to the workspace or absolute), or None when it plays with the configured executor model."""
        return checkpoint_path(self.workspace, (program.manifest or {}).get("model"))

    def executor_for(self, program: Program) -> Backend:
        """The executor as ``program`` plays: with its own checkpoint's weights when it carries one
        (a trained program and every descendant, which inherit the manifest's ``model``), else the
        configured executor. The two most recently used checkpoints stay loaded."""
        ckpt = self.checkpoint_of(program)
        rc = self.config.role("executor")
        if ckpt is None or ckpt == rc.model:
            return self.backend("executor")
        key = ("checkpoint", rc.backend, ckpt, self._role_key("executor")[2])
        if key in self._backends:
            self._backends[key] = self._backends.pop(key)  # most recent last
        else:
            loaded = [k for k in self._backends if k[0] == "checkpoint"]
            for old in loaded[:-1]:
                self._backends.pop(old).close()
            self._backends[key] = _remote(plugins.make("backend", rc.backend, model=ckpt, **rc.options),
                                          rc.backend, ckpt, rc.options)
        return CountingBackend(self._backends[key], self.tokens, "executor", self.ledger, self.price("executor"))

    def price(self, role: str):
        """The role's price per million tokens (``budget.prices``, by the model the role names, else its
        backend's name); a trained checkpoint of the executor costs what the executor's model does."""
        rc = self.config.role(role)
        return self.config.budget.price(rc.model or rc.backend)

    def _role_key(self, role: str) -> tuple:
        rc = self.config.role(role)
        return (rc.backend, rc.model, tuple(sorted((k, repr(v)) for k, v in rc.options.items())))

    def loaded(self, role: str) -> Backend | None:
        """The role's backend if it was made already (None: nothing loaded yet)."""
        return self._backends.get(self._role_key(role))

    def close(self) -> None:
        for b in self._backends.values():
            b.close()
        self._backends.clear()
