"""A pool of worker processes for simulators that hold one episode per process.

The evaluator is single-threaded and keeps up to ``max_live`` Envs open, stepping them interleaved. A
simulator process (a game engine, a JVM, a browser) that holds one episode at a time cannot serve two of
them, and waiting for a free one would deadlock the evaluator. So an Env leases a worker on ``reset`` and
releases it on ``close``, and keeps its action history: whenever its worker holds another state (the
worker died and was restarted, or it is shared because more Envs are live than workers) the history is
replayed onto it first. The simulator must be deterministic for replay to restore the state.

A benchmark sets ``max_live = pool.size``: then every live Env has a worker of its own and replays only
after a crash. Sharing is the fallback when more Envs are live anyway (an explicit ``--max-live``, a
direct caller); it costs a replay per switch, bounded by ``max_replay`` steps per replay, beyond which
the episode fails with :class:`EpisodeLostError` (the evaluator fails that episode; the others go on).
A worker that cannot start is a systemic failure: :class:`~evolver.errors.BenchmarkError`.

Workers start on first use and stop on :meth:`EnvPool.close` and at interpreter exit.
examples/pooled_simulator.py is a whole benchmark built on it.
"""
from __future__ import annotations

import abc
import atexit
import itertools
import threading
import warnings
import weakref
from typing import Callable, Generic, TypeVar

from evolver.benchmarks.base import Env
from evolver.errors import BenchmarkError, EvolverError
from evolver.types import Observation

W = TypeVar("W")

#: Replays longer than this fail their episode (a benchmark may pass its own bound).
MAX_REPLAY = 1000


class EpisodeLostError(EvolverError):
    """One episode could not go on in its pool (replay beyond ``max_replay``, or its worker died twice
    in a row): not systemic, so the evaluator fails this episode only (it is no ``BenchmarkError``)."""


class _Slot:
    """One worker place: the worker (None until started), who holds it, whose episode it holds."""

    def __init__(self, index: int):
        self.index = index
        self.lock = threading.RLock()  # serialises every use of the worker
        self.worker = None
        self.holders = 0  # live leases on this slot (more than one: shared)
        self.owner = 0  # token of the lease whose episode the worker holds (0: none)
        self.used = False  # it held an episode since it started: reset it before the next one


class Lease:
    """An Env's claim on one pool slot, possibly shared; ``release`` is idempotent."""

    _tokens = itertools.count(1)

    def __init__(self, pool: "EnvPool", slot: _Slot):
        self.pool, self.slot = pool, slot
        self.token = next(Lease._tokens)
        self.released = False

    def release(self) -> None:
        with self.pool._lock:
            if self.released:
                return
            self.released = True
            self.slot.holders -= 1

    def run(self, env: "PooledEnv", action: str | None) -> Observation:
        """Apply ``action`` (None: begin the episode) on the worker positioned at ``env``'s episode."""
        pool, slot = self.pool, self.slot
        if self.released:
            raise EpisodeLostError("this episode's pool lease was released; reset() the Env first")
        for attempt in (0, 1):
            with slot.lock:
                worker = pool._ready(slot)
                try:
                    obs = None
                    if slot.owner != self.token:
                        obs = self._position(env, worker)
                    return obs if action is None else env.act(worker, action)
                except (EvolverError, KeyboardInterrupt):
                    raise
                except Exception as exc:
                    if pool._alive is not None and pool._alive(worker):
                        raise  # the worker lives: the Env's own bug, not a crash
                    pool._drop(slot)
                    if attempt:
                        raise EpisodeLostError(f"the pool worker died twice in a row during this episode "
                                               f"(last: {exc!r}); history {len(env.history)} steps") from exc
        raise AssertionError("unreachable")

    def _position(self, env: "PooledEnv", worker) -> Observation:
        pool, slot = self.pool, self.slot
        if len(env.history) > pool.max_replay:
            raise EpisodeLostError(
                f"replaying this episode needs {len(env.history)} steps, over the pool's max_replay "
                f"{pool.max_replay}: its worker died or is shared by more live Envs than the pool has workers "
                f"({pool.size}); give the benchmark max_live = pool size")
        slot.owner = 0  # mid-way: no episode's state
        if slot.used and pool._reset is not None:
            pool._reset(worker)
        slot.used = True
        obs = env.begin(worker)
        for done in env.history:
            obs = env.act(worker, done)
        if env.history:
            with pool._lock:
                pool.stats["replays"] += 1
                pool.stats["replayed_steps"] += len(env.history)
        slot.owner = self.token
        return obs


class EnvPool(Generic[W]):
    """``size`` workers, each holding one episode at a time, for Envs that subclass :class:`PooledEnv`.

    ``start()`` makes a worker; ``reset(worker)`` clears one before it takes another episode (None when
    ``begin`` starts afresh anyway); ``stop(worker)`` ends one (default: its ``close()``, if any);
    ``alive(worker)`` says whether it still runs (checked before each use; without it, any exception
    from a worker call counts as a crash). A dead worker is restarted and the episode replayed. Leasing
    never blocks: beyond ``size`` live Envs, workers are shared (see the module docstring)."""

    def __init__(self, start: Callable[[], W], size: int, *, reset: Callable[[W], None] | None = None,
                 stop: Callable[[W], None] | None = None, alive: Callable[[W], bool] | None = None,
                 max_replay: int = MAX_REPLAY):
        if size < 1:
            raise ValueError(f"an EnvPool needs at least one worker (size={size})")
        self.size, self.max_replay = size, max_replay
        self._start, self._reset, self._stop, self._alive = start, reset, stop, alive
        self._slots = [_Slot(i) for i in range(size)]
        # Reentrant: a lease's finalizer may run inside any allocation made while it is held.
        # Lock order: a slot's lock, then this one; never the reverse.
        self._lock = threading.RLock()
        self.closed = False
        #: Counters for tests and reports: workers started (restarts included), restarts after a
        #: crash, replays and the steps they replayed, leases that had to share a worker.
        self.stats = {"started": 0, "restarts": 0, "replays": 0, "replayed_steps": 0, "shared": 0}
        self._warned = False
        _POOLS.add(self)

    def lease(self, brief: bool = False) -> Lease:
        """A slot for a new episode: the least-held one, an already started worker first. ``brief``: a
        lease that reads and lets go (a :class:`PooledEnv` with ``brief = True``); its sharing is by
        design and draws no warning."""
        with self._lock:
            if self.closed:
                raise BenchmarkError("this EnvPool was closed; make a new benchmark")
            slot = min(self._slots, key=lambda s: (s.holders, s.worker is None, s.index))
            if slot.holders:
                self.stats["shared"] += 1
                if not brief and not self._warned:  # once per pool: an author sees slow episodes, not why
                    self._warned = True
                    warnings.warn(f"EnvPool: more live Envs than its {self.size} workers, so episodes share "
                                  "workers and replay their histories at every switch (slow). Give the "
                                  f"benchmark max_live = {self.size} (the evaluator then keeps no more open), "
                                  "or make the pool bigger", RuntimeWarning, stacklevel=3)
            slot.holders += 1
            return Lease(self, slot)

    @property
    def workers(self) -> list[W]:
        """The workers running now."""
        return [s.worker for s in self._slots if s.worker is not None]

    @property
    def leased(self) -> int:
        """Live leases (above ``size`` when workers are shared)."""
        return sum(s.holders for s in self._slots)

    def close(self) -> None:
        """Stop every worker; later leases fail. Idempotent."""
        with self._lock:
            self.closed = True
        for slot in self._slots:
            with slot.lock:
                self._drop(slot, crashed=False)

    def __enter__(self) -> "EnvPool[W]":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- workers ------------------------------------------------------------------------------
    def _ready(self, slot: _Slot) -> W:
        """The slot's worker, started (or restarted after a crash) as needed. Holds ``slot.lock``."""
        if self.closed:
            raise BenchmarkError("this EnvPool was closed; make a new benchmark")
        if slot.worker is not None and self._alive is not None and not self._alive(slot.worker):
            self._drop(slot)
        if slot.worker is None:
            try:
                worker = self._start()
            except EvolverError:
                raise
            except Exception as exc:
                raise BenchmarkError(f"starting a pool worker failed: {exc!r}") from exc
            slot.worker, slot.owner, slot.used = worker, 0, False
            with self._lock:
                self.stats["started"] += 1
        return slot.worker

    def _drop(self, slot: _Slot, crashed: bool = True) -> None:
        """Stop the slot's worker (a crashed one too: it may linger); the next use starts another."""
        worker, slot.worker, slot.owner, slot.used = slot.worker, None, 0, False
        if worker is None:
            return
        if crashed:
            with self._lock:
                self.stats["restarts"] += 1
        try:
            if self._stop is not None:
                self._stop(worker)
            elif callable(getattr(worker, "close", None)):
                worker.close()
        except Exception:
            pass  # it is gone or going; nothing more a pool can do


class PooledEnv(Env):
    """An Env whose episode lives in an :class:`EnvPool` worker. A subclass says how to ``begin`` an
    episode on a worker and ``act`` on it; this class leases, replays the history and releases."""

    #: A lease held for a moment (a query that reads something and closes), not an episode: sharing a
    #: worker for it is expected, so the pool does not warn of too few workers.
    brief: bool = False

    def __init__(self, pool: EnvPool):
        self.pool = pool
        self.history: list[str] = []  # every action stepped, in order: replaying it restores the state
        self._lease: Lease | None = None
        self._finalizer = None

    @abc.abstractmethod
    def begin(self, worker) -> Observation:
        """Start this Env's episode on ``worker`` (from the task's seed); the first observation."""

    @abc.abstractmethod
    def act(self, worker, action: str) -> Observation:
        """Apply one action on ``worker``, which holds this episode; never raises for a bad action."""

    def reset(self) -> Observation:
        self.close()
        self.history = []
        lease = self.pool.lease(self.brief)
        # Released when the Env is closed or garbage-collected, whichever comes first.
        self._lease, self._finalizer = lease, weakref.finalize(self, lease.release)
        return lease.run(self, None)

    def step(self, action: str) -> Observation:
        if self._lease is None:
            self.reset()
        obs = self._lease.run(self, action)
        self.history.append(action)
        return obs

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._lease = self._finalizer = None


_POOLS: "weakref.WeakSet[EnvPool]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for pool in list(_POOLS):
        pool.close()
