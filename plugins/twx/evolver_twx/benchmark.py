"""TextWorldExpress (twx): procedurally generated text games, played through a few shared JVMs.

Suites (measured on the first 50 dev seeds; random agent = uniform valid action, 30 dev seeds):

- ``twx-easy``: cookingworld (1 room, 1 ingredient), twc (1 room, 2 items), simonsays (3 commands,
  2 distractors), peckingorder, sorting, arithmetic. A random agent scores ~0.15 / 0.3 on
  cookingworld / twc and ~0 elsewhere, so the tier has headroom.
- ``twx-hard``: the same games with more rooms, ingredients, distractors and items (peckingorder,
  sorting and arithmetic take no parameters in twx 1.1.0, so they equal the easy tier).

Splits are twx's own seed folds (``gameFold``): train seeds 0-999, dev 10000-10999, test 20000-20999;
the fold also selects twx's held-out object/recipe lists. ``tasks(split, n)`` takes the first ``n`` seeds
of the fold per game (``n=None``: ``DEFAULT_PER_CATEGORY`` = 50), so a bigger ``n`` extends a smaller
one. Task id ``twx-easy/cookingworld/dev/7`` is dev seed 10007. Seeds whose gold path twx itself cannot
win cleanly are skipped (twx 1.1.0: 55 of 1000 peckingorder dev seeds), so ids may have gaps.
Task.gold is twx's gold path, replayed and cut at the winning step.

Scores: twx reports a normalised score (points / max points, 0..1) but sets it to -1 when a game is
lost (wrong Simon command, wrong box, ...). We clamp to [0, 1]: a lost game scores 0, partial credit
before it is forfeited, as twx intends. ``info['won']`` is twx's ``tasksuccess``.

Step limits: twice the longest gold path over the first 50 dev seeds, clamped to [10, 40]
(gold paths are twx's scripted random-walk solutions, not shortest paths). Every ``step`` call
counts, invalid commands included.

JVMs: a twx JVM costs ~0.4 s to start and 130-390 MB, and the evaluator plays dozens of episodes at
once, so a benchmark owns ``jvm_pool`` JVMs (default 2) shared by all its Envs. A JVM can hold many
``PythonInterface`` games: each Env leases its own on the least-loaded JVM, so consecutive steps never
replay. Envs keep their action history and replay it (twx is deterministic) onto a fresh session when
(a) a JVM died and was restarted, or (b) another live episode on the same JVM touched the same
JVM-side objects: twx builds sorting games from 100 static problems per fold (``seed % 100``) whose
item objects are shared, so two sorting games of one problem (a GRPO group) would move each other's
items. ``_Jvm.owner`` records which episode last used each such key. Replaying costs ~4 ms per step.
"""
from __future__ import annotations

import atexit
import dataclasses
import itertools
import json
import os
import shutil
import threading
import weakref
from pathlib import Path

from evolver import SPLITS, Benchmark, BenchmarkError, Env, Observation, Task, UnknownNameError

JAVA_MISSING = ("Java 17 not found: install a JRE (apt-get install openjdk-17-jre-headless) "
                "or use --benchmark basic")
DEFAULT_PER_CATEGORY = 50
FOLD_BASE = {"train": 0, "dev": 10000, "test": 20000}  # twx 1.1.0's seed folds, 1000 seeds each
FOLD_SIZE = 1000
#: Opt-in skill packs (``TwxBenchmark.skill_packs``): ``packs/twx-experts``, twx's hand-written solvers.
PACKS = Path(__file__).resolve().parent / "packs"

_CW = "numLocations={},numIngredients={},numDistractorItems={},includeDoors={},limitInventorySize=0"
_TWC = "numLocations={},numItemsToPutAway={},includeDoors={},limitInventorySize=0"
# game -> (twx gameParams, step limit). Gold lengths (min-max, first 50 dev seeds) in comments.
SUITES: dict[str, dict[str, tuple[str, int]]] = {
    "twx-easy": {
        "cookingworld": (_CW.format(1, 1, 0, 0), 26),  # gold 8-13
        "twc": (_TWC.format(1, 2, 0), 14),  # gold 5-7
        "simonsays": ("gameLength=3,numDistractors=2", 10),  # gold 3
        "peckingorder": ("", 18),  # gold 9
        "sorting": ("", 20),  # gold 6-10
        "arithmetic": ("", 10),  # gold 5
    },
}
SUITES["twx-hard"] = {**SUITES["twx-easy"],  # peckingorder, sorting, arithmetic take no parameters
                      "cookingworld": (_CW.format(3, 2, 3, 1), 40),  # gold 11-26
                      "twc": (_TWC.format(2, 4, 1), 30),  # gold 11-15
                      "simonsays": ("gameLength=8,numDistractors=5", 16)}  # gold 8


def _find_java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if not found:
        raise BenchmarkError(JAVA_MISSING)
    return found


class _Jvm:
    """One JVM process and its py4j gateway. ``lock`` serialises all calls into it."""

    def __init__(self, java: str):
        self.java = java
        self.lock = threading.RLock()
        self.gen = 0  # bumped on restart: sessions of an older generation are dead
        self.leases = 0
        self.owner: dict[tuple, int] = {}  # shared-object key -> token of the episode that last used it
        # Idle sessions as (generation, loaded game key, session); guarded by the pool's lock.
        self.free: list[tuple[int, str, object]] = []
        self.gateway = self.proc = None

    def start(self) -> None:
        try:
            from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
            from textworld_express.constants import BASEPATH, JAR_PATH
        except ImportError as e:
            raise BenchmarkError(f"textworld-express is not installed ({e}): pip install "
                                 "textworld-express==1.1.0, or use --benchmark basic") from e
        try:
            # cwd: the jar reads its data files (recipes, object folds) from the package folder.
            # die_on_exit: the JVM quits when our process does, so a crash leaves no orphans.
            # New process group: Ctrl-C reaches only Python, which then closes the JVMs in order.
            port, proc = launch_gateway(
                classpath=JAR_PATH, die_on_exit=True, cwd=BASEPATH, return_proc=True,
                java_path=self.java, create_new_process_group=True,
                javaopts=["-Xmx1g", "-XX:+UseSerialGC"])
        except Exception as e:
            raise BenchmarkError(f"{JAVA_MISSING} (starting the JVM failed: {e})") from e
        self.proc = proc
        self.gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_field=True),
                                   java_process=proc)

    def new_session(self):
        return self.gateway.jvm.textworldexpress.runtime.PythonInterface()

    def stop(self) -> None:
        gateway, proc, self.gateway, self.proc = self.gateway, self.proc, None, None
        try:
            if gateway is not None:
                gateway.shutdown()
            if proc is not None and proc.poll() is None:  # die_on_exit: a line on stdin ends it
                proc.stdin.write(b"\n")
                proc.stdin.flush()
                proc.wait(timeout=5)
        except Exception:  # already dead, or deaf: make sure
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)


class _Pool:
    """``size`` JVMs started on first use; sessions go to the JVM with the fewest live leases."""

    MAX_FREE = 64  # idle sessions kept per JVM for reuse; the rest are left to py4j's GC

    def __init__(self, size: int, java: str):
        self.jvms = [_Jvm(java) for _ in range(max(1, size))]
        # Reentrant: an Env's finalizer (lease release) can run inside any allocation, even one
        # made while this lock is held. Lock order: a JVM's lock, then this one; never the reverse.
        self.lock = threading.RLock()
        self.closed = False
        _POOLS.add(self)

    def acquire(self, game: str, params: str):
        key = f"{game}|{params}"
        with self.lock:
            if self.closed:
                raise BenchmarkError("the twx benchmark was closed; make a new one")
            jvm = min(self.jvms, key=lambda j: j.leases)
            jvm.leases += 1
        try:
            with jvm.lock:
                if jvm.gateway is None:
                    jvm.start()
                loaded, session = self._reuse(jvm, key)
                if session is None:
                    session = jvm.new_session()
                if loaded != key:
                    msg = session.load(game, params)
                    if msg:
                        raise BenchmarkError(f"twx rejected {game} {params!r}: {msg.strip()}")
            return _Lease(self, jvm, jvm.gen, session, key)
        except BaseException:
            with self.lock:
                jvm.leases -= 1
            raise

    def _reuse(self, jvm: _Jvm, key: str) -> tuple[str | None, object]:
        """An idle live session, preferably with this game loaded (load() costs 2-500 ms)."""
        with self.lock:
            jvm.free = [f for f in jvm.free if f[0] == jvm.gen]  # sessions of a dead JVM are gone
            pick = next((i for i, f in enumerate(jvm.free) if f[1] == key), len(jvm.free) - 1)
            return jvm.free.pop(pick)[1:] if jvm.free else (None, None)

    def restart(self, jvm: _Jvm, gen: int) -> None:
        with jvm.lock:
            if jvm.gen == gen and not self.closed:  # another env may have restarted it already
                jvm.stop()
                jvm.owner.clear()
                jvm.gen += 1
                jvm.start()

    def close(self) -> None:
        with self.lock:
            self.closed = True
        for jvm in self.jvms:
            with jvm.lock:
                jvm.stop()


class _Lease:
    """An Env's session; ``release`` is idempotent and also runs when the Env is garbage-collected."""

    def __init__(self, pool: _Pool, jvm: _Jvm, gen: int, session, key: str):
        self.pool, self.jvm, self.gen, self.session, self.key = pool, jvm, gen, session, key
        self.done = False

    def release(self) -> None:
        if self.done:
            return
        self.done = True
        with self.pool.lock:
            self.jvm.leases -= 1
            if self.jvm.gen == self.gen and not self.pool.closed and len(self.jvm.free) < _Pool.MAX_FREE:
                self.jvm.free.append((self.gen, self.key, self.session))
        self.session = None


_POOLS: "weakref.WeakSet[_Pool]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # JVMs would die with us anyway (die_on_exit); closing them first keeps py4j from logging
    # broken-pipe errors while the interpreter tears down.
    for pool in list(_POOLS):
        pool.close()


_TOKENS = itertools.count(1)  # episode identities for ``_Jvm.owner`` (0: a task being built)


def _shared_key(game: str, params: str, fold: str, seed: int) -> tuple:
    # Games that may share JVM-side objects. Measured: only sorting games of one problem do; the
    # key covers every game (arithmetic has a 100-problem table too), as a cheap guard.
    return (game, params, fold, seed % 100)


class TwxEnv(Env):
    """One episode. Keeps its action history so it can be replayed on a fresh JVM."""

    def __init__(self, pool: _Pool, task: Task, max_steps: int):
        self.pool, self.task, self.max_steps = pool, task, max_steps
        self.game, self.params = task.category, task.meta["params"]
        self.fold, self.seed = task.meta["fold"], task.seed
        self.history: list[str] = []  # the commands twx accepted, in order: replaying them restores state
        self.steps = 0  # every step() call counts toward the limit, invalid ones included
        self.lease: _Lease | None = None
        self._finalizer = None
        self.last: Observation | None = None
        self.token = next(_TOKENS)
        self.shared = _shared_key(self.game, self.params, self.fold, self.seed)

    # -- JVM plumbing ---------------------------------------------------------------------------
    def _run(self, action: str | None) -> dict:
        """Apply ``action`` (None: nothing) on a session positioned at this episode's state: a new
        session, or one whose shared objects another episode used since, is first positioned by
        generating the game and replaying the history (see the module docstring)."""
        from py4j.protocol import Py4JNetworkError
        for attempt in range(2):
            if self.pool.closed:
                raise BenchmarkError("the twx benchmark was closed; make a new one")
            fresh = self.lease is None or self.lease.jvm.gen != self.lease.gen
            try:
                if fresh:
                    self._drop_lease()
                    lease = self.pool.acquire(self.game, self.params)
                    self.lease, self._finalizer = lease, weakref.finalize(self, lease.release)
                lease = self.lease
                with lease.jvm.lock:
                    raw = None
                    if fresh or lease.jvm.owner.get(self.shared) != self.token:
                        raw = lease.session.generateNewGameJSON(self.seed, self.fold, False)
                        for done_action in self.history:
                            raw = lease.session.stepJSON(done_action)
                    if action is not None:
                        raw = lease.session.stepJSON(action)
                    lease.jvm.owner[self.shared] = self.token
                    if raw is None:
                        raise AssertionError("_run(None) on a positioned session")
                    return json.loads(raw)
            except Py4JNetworkError as e:  # the JVM died: restart it once and replay
                if attempt or self.lease is None:
                    raise BenchmarkError(f"twx JVM died and did not recover: {e}") from e
                self.pool.restart(self.lease.jvm, self.lease.gen)
        raise AssertionError("unreachable")

    def _drop_lease(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # runs lease.release once
        self.lease = self._finalizer = None

    # -- Env API --------------------------------------------------------------------------------
    def reset(self) -> Observation:
        self.history, self.steps, self.last = [], 0, None
        self._drop_lease()  # a fresh session starts the game from its seed
        self.last = self._observe(self._run(None), valid=True)
        return self.last

    def step(self, action: str) -> Observation:
        from py4j.protocol import Py4JJavaError
        if self.last is None:
            self.reset()
        if self.last.done:
            return Observation(text="The game is over.", actions=[], score=self.last.score, done=True,
                               info={**self.last.info, "valid": False})
        self.steps += 1
        wanted = " ".join(str(action).split())
        # twx matches commands exactly (case and spaces): map near-misses onto the listed action.
        canon = {a.lower(): a for a in self.last.actions or []}
        command = canon.get(wanted.lower(), wanted)
        try:
            raw = self._run(command)
        except Py4JJavaError as e:  # never raise for a bad action: answer it, state unchanged
            self._drop_lease()  # the game may have half-applied it: replay onto a clean session
            obs = Observation(text=f"The game could not process {wanted!r}.", actions=self.last.actions,
                              score=self.last.score, done=False,
                              info={**self.last.info, "valid": False, "error": str(e)[:200]})
            return self._count_step(obs)
        self.history.append(command)
        return self._count_step(self._observe(raw, valid=command in canon.values()))

    def _count_step(self, obs: Observation) -> Observation:
        obs.info["steps"] = self.steps
        if not obs.done and self.steps >= self.max_steps:
            obs.done = True
            obs.info["truncated"] = True
        self.last = obs
        return obs

    def _observe(self, raw: dict, valid: bool) -> Observation:
        twx_score = float(raw.get("score", 0.0))
        won, lost = bool(raw.get("tasksuccess")), bool(raw.get("taskfailure"))
        info = {"won": won, "lost": lost, "valid": valid, "twx_score": twx_score,
                "points": raw.get("scoreRaw"), "look": raw.get("look", ""),
                "inventory": raw.get("inventory", ""), "task": self.task.meta.get("description", ""),
                "truncated": False, "steps": self.steps}
        return Observation(text=raw.get("observation", "") + self._score_line(raw.get("scoreRaw")),
                           actions=sorted(raw.get("validActions", [])),
                           score=min(1.0, max(0.0, twx_score)), done=won or lost or twx_score >= 1.0,
                           info=info)

    def _score_line(self, points) -> str:
        """The change in points, said as a text game says it: twx keeps the score out of the text, and a
        wrong move in twc (an object put in the wrong place) costs a point without a word."""
        before = (self.last.info.get("points") if self.last else None) or 0
        if points is None or self.last is None or points == before:
            return ""
        change = points - before
        way, n = ("up", change) if change > 0 else ("down", -change)
        return f"\n[Your score has gone {way} by {n:g} point{'s' if n != 1 else ''}.]"

    def close(self) -> None:
        self._drop_lease()


class TwxBenchmark(Benchmark):
    name = "twx"
    #: The seed carries no knowledge of twx: what it needs is for evolution to find.
    seed_skills: list[str] = []
    #: ``twx-experts``, opt in with ``--set seed_skills=twx-experts``: solvers written by hand for twx
    #: (``metadata.hand_written``), a comparison, not the product. Arithmetic and sorting need exact
    #: computation (22 / 11; 47g < 15kg), twc common knowledge of where things go (``usual-place``'s data
    #: is mined from the train fold's gold paths), cookingworld exact commands in order; their scripts
    #: supply them and the seed harness shows their answer as a note.
    skill_packs = {"twx-experts": PACKS / "twx-experts"}

    def __init__(self, suite: str = "twx-easy", games: list[str] | str | None = None,
                 max_steps: int | None = None, jvm_pool: int = 2):
        if suite not in SUITES:
            raise UnknownNameError("twx suite", suite, list(SUITES))
        table = SUITES[suite]
        if isinstance(games, str):
            games = [g.strip() for g in games.split(",") if g.strip()]
        for game in games or []:
            if game not in table:
                raise UnknownNameError(f"{suite} game", game, list(table))
        self.suite = suite
        self.categories = list(games or table)
        self.games = {g: table[g] for g in self.categories}
        self._max_steps_override = max_steps
        self.max_steps = max_steps or max(limit for _, limit in self.games.values())
        self._pool = _Pool(jvm_pool, _find_java())  # finds Java now; starts JVMs on first use
        self._cache: dict[tuple[str, str, int], Task | None] = {}

    def _make_task(self, game: str, split: str, index: int) -> Task | None:
        """The task of one fold seed, or None when twx's own gold path does not win it cleanly."""
        params = self.games[game][0]
        seed = FOLD_BASE[split] + index
        lease = self._pool.acquire(game, params)
        try:
            with lease.jvm.lock:
                first = json.loads(lease.session.generateNewGameJSON(seed, split, True))
                gold = [str(a) for a in lease.session.getGoldActionSequence()]
                description = lease.session.getTaskDescription()
                # Replay the gold path as the Env will (no gold flag) to check it and trim it.
                lease.session.generateNewGameJSON(seed, split, False)
                for n, action in enumerate(gold, 1):
                    raw = json.loads(lease.session.stepJSON(action))
                    if raw["taskfailure"] or raw["tasksuccess"]:
                        break
                lease.jvm.owner[_shared_key(game, params, split, seed)] = 0  # live games replay
        finally:
            lease.release()
        if not gold or not raw["tasksuccess"] or raw["taskfailure"]:
            return None  # e.g. 55 peckingorder dev seeds: a duplicated item trips a spurious loss
        gold = gold[:n]  # multi-room twc gold paths wander on after the win
        return Task(id=f"{self.suite}/{game}/{split}/{index}", benchmark=self.name, split=split,
                    category=game, seed=seed, prompt=f"{description}\n\n{first['observation'].strip()}",
                    gold=gold, meta={"suite": self.suite, "params": params, "fold": split,
                                     "max_steps": self._max_steps_override or self.games[game][1], "gold_len": len(gold),
                                     "description": description})

    def tasks(self, split: str, per_category: int | None = None) -> list[Task]:
        """The first ``per_category`` seeds of the split's fold per game (default 50), skipping the
        few seeds whose gold path twx itself cannot win (so ids can have gaps)."""
        if split not in SPLITS:
            raise BenchmarkError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
        n = DEFAULT_PER_CATEGORY if per_category is None else per_category
        out = []
        for game in self.categories:
            found = 0
            for i in range(FOLD_SIZE):
                if found >= n:
                    break
                key = (game, split, i)
                if key not in self._cache:
                    self._cache[key] = self._make_task(game, split, i)
                if self._cache[key] is not None:
                    out.append(self._cache[key])
                    found += 1
        return out

    def env(self, task: Task) -> TwxEnv:
        if task.category not in self.games and "params" not in task.meta:
            raise UnknownNameError(f"{self.suite} game", task.category, list(self.games))
        if "params" not in task.meta:  # a hand-made Task: fill in this suite's settings
            task = dataclasses.replace(task, meta={**task.meta, "params": self.games[task.category][0],
                                                   "fold": task.split})
        limit = self._max_steps_override or task.meta.get("max_steps") or self.max_steps
        return TwxEnv(self._pool, task, limit)

    def close(self) -> None:
        self._pool.close()
