"""EnvPool (evolver/envpool.py): one episode per worker, leases that never block, replay after a crash or
while sharing, a bound on replay that fails only its episode, and no worker left after close or exit."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from evolver import Benchmark, EnvPool, Observation, PooledEnv, Task
from evolver.backends.scripted import ScriptedBackend
from evolver.envpool import EpisodeLostError
from evolver.errors import BenchmarkError
from evolver.evaluate import run_episodes
from evolver.harness import program_context
from evolver.seeding import seed_files
from evolver.programs import content_hash
from evolver.types import Program


# -- an in-process worker: fast, and killed by a flag -----------------------------------------
class Counter:
    """Holds one episode: a value from a seed, mixed with each action (so order and history matter)."""

    def __init__(self):
        self.value, self.dead, self.resets, self.crash_next, self.calls = None, False, 0, False, 0

    def apply(self, action):
        self.calls += 1
        if self.dead or self.crash_next or action == "boom":
            self.dead = True
            raise BrokenPipeError("worker gone")
        self.value = (self.value * 31 + sum(map(ord, action))) % 1_000_003
        return self.value


class CounterEnv(PooledEnv):
    def __init__(self, pool, seed):
        super().__init__(pool)
        self.seed = seed

    def begin(self, worker):
        worker.value = self.seed
        return Observation(f"start {self.seed}")

    def act(self, worker, action):
        return Observation(f"value {worker.apply(action)}", score=min(1.0, len(self.history) / 4))


def counter_pool(size, **kw):
    def reset(w):
        w.value, w.resets = None, w.resets + 1
    return EnvPool(Counter, size, reset=reset, alive=lambda w: not w.dead, **kw)


def interleaved(pool, seeds, actions):
    """Every env reset, then stepped in lockstep like the evaluator: the observations per env."""
    envs = [CounterEnv(pool, s) for s in seeds]
    seen = [[env.reset().text] for env in envs]
    for action in actions:
        for env, out in zip(envs, seen):
            out.append(env.step(action).text)
    for env in envs:
        env.close()
    return seen


def test_live_envs_get_workers_of_their_own_up_to_size_started_lazily_and_reset_for_the_next():
    pool = counter_pool(3)
    assert pool.workers == [] and pool.stats["started"] == 0  # nothing starts before an Env needs it
    a, b = CounterEnv(pool, 1), CounterEnv(pool, 2)
    a.reset(), b.reset()
    assert len(pool.workers) == 2 and pool.workers[0] is not pool.workers[1] and pool.leased == 2
    a.close()
    c = CounterEnv(pool, 3)
    c.reset()  # takes the worker a released (no third start), reset first
    assert pool.stats["started"] == 2 and sum(w.resets for w in pool.workers) == 1
    more = [CounterEnv(pool, s) for s in (4, 5, 6)]
    with pytest.warns(RuntimeWarning, match=r"more live Envs than its 3 workers.*Give the benchmark max_live = 3"):
        for env in more:
            env.reset()  # never blocks: beyond size, workers are shared (said once, not per lease)
    assert len(pool.workers) == 3 and pool.stats["started"] == 3 and pool.leased == 5
    assert pool.stats["shared"] == 2 and pool.stats["replays"] == 0
    for env in [b, c, *more]:
        env.close()
    assert pool.leased == 0


def test_a_brief_lease_shares_a_worker_without_a_warning():
    import warnings

    class Query(CounterEnv):
        brief = True  # reads and lets go: sharing for it is by design
    pool = counter_pool(1)
    episode, query = CounterEnv(pool, 1), Query(pool, 2)
    episode.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        query.reset()
    assert pool.stats["shared"] == 1
    query.close(), episode.close()


def test_sharing_replays_and_plays_exactly_as_with_enough_workers():
    seeds, actions = [11, 12, 13, 14, 15], ["n", "e", "take", "s", "open"]
    roomy, tight = counter_pool(5), counter_pool(2)
    alone = interleaved(roomy, seeds, actions)
    shared = interleaved(tight, seeds, actions)
    assert shared == alone and len({tuple(s) for s in alone}) == 5  # episodes differ, sharing changed none
    assert roomy.stats["replays"] == 0
    assert tight.stats["replays"] > 0 and len(tight.workers) == 2


def test_a_crashed_worker_is_restarted_and_the_episode_replayed():
    pool = counter_pool(1)
    reference = interleaved(counter_pool(1), [7], ["a", "b", "c", "d"])[0]
    env = CounterEnv(pool, 7)
    got = [env.reset().text, env.step("a").text, env.step("b").text]
    dead = pool.workers[0]
    dead.dead, calls = True, dead.calls  # between steps: found dead before the next use, so not called
    got.append(env.step("c").text)
    assert dead.calls == calls and pool.workers[0] is not dead
    pool.workers[0].crash_next = True  # and during a call: retried once on a new worker, after a replay
    got.append(env.step("d").text)
    assert got == reference
    assert pool.stats["restarts"] == 2 and pool.stats["replayed_steps"] == 2 + 3


def test_a_worker_that_dies_again_on_replay_fails_its_episode_and_a_start_failure_is_systemic():
    pool = counter_pool(1)
    env = CounterEnv(pool, 1)
    env.reset()
    env.step("a")
    with pytest.raises(EpisodeLostError, match="died twice"):
        env.step("boom")  # the same action kills the restarted worker too
    assert not isinstance(EpisodeLostError("x"), BenchmarkError)

    def broken():
        raise OSError("no such simulator")
    with pytest.raises(BenchmarkError, match="no such simulator"):
        CounterEnv(EnvPool(broken, 2), 1).reset()


def test_a_bug_in_the_env_is_not_a_crash_when_the_pool_can_tell():
    pool = counter_pool(1)
    env = CounterEnv(pool, 1)
    env.reset()
    env.act = lambda worker, action: 1 / 0
    with pytest.raises(ZeroDivisionError):
        env.step("a")
    assert pool.stats["restarts"] == 0


def test_replay_beyond_the_bound_fails_that_episode():
    pool = counter_pool(1, max_replay=3)
    long, short = CounterEnv(pool, 1), CounterEnv(pool, 2)
    long.reset()
    for action in "abcd":
        long.step(action)
    short.reset()  # shares the only worker: it now holds short's episode
    assert short.step("x").text.startswith("value")
    with pytest.raises(EpisodeLostError, match="max_replay 3"):
        long.step("e")  # 4 steps to replay
    assert short.step("y").text.startswith("value")  # the other episode goes on


# -- the same through the evaluator -----------------------------------------------------------
class CounterBench(Benchmark):
    name = "counter"
    categories = ["count"]
    max_steps = 6
    harness_hints = {"preset": "chat"}

    def __init__(self, pool, steps):
        self.pool, self.steps = pool, steps

    def tasks(self, split, per_category=None):
        return [Task(id=f"counter/{split}/{i}", benchmark="counter", split=split, category="count", seed=i,
                     prompt=f"Count {i}.", max_steps=n) for i, n in enumerate(self.steps)]

    def env(self, task):
        return CounterEnv(self.pool, task.seed)


def program(tmp_path):
    root = seed_files(skills=[], into=tmp_path / "p")
    return Program("p", "", str(root), content_hash(root), {})


def test_the_evaluator_fails_only_the_episode_whose_replay_is_over_the_bound(tmp_path):
    bench = CounterBench(counter_pool(1, max_replay=2), steps=[6, 2, 2])
    eps = run_episodes(program_context(program(tmp_path)), bench, ScriptedBackend(rule=lambda r: "go"),
                       bench.tasks("dev"), max_live=2)
    assert "max_replay 2" in eps[0].error and eps[0].score == 0.0
    assert [e.error for e in eps[1:]] == [None, None] and [len(e.steps) for e in eps[1:]] == [2, 2]
    assert bench.pool.leased == 0


# -- real processes: kill -9, close, interpreter exit -----------------------------------------
WORKER = textwrap.dedent("""
    import json, os, sys
    value = None
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "new":
            value = msg["seed"]
        else:
            value = (value * 31 + msg["n"]) % 1000003
        print(json.dumps({"value": value, "pid": os.getpid()}), flush=True)
""")


class Proc:
    """A worker process speaking JSON lines."""

    def __init__(self, log=None):
        self.p = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        self.log = log

    def call(self, **msg):
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise EOFError("worker exited")
        return json.loads(line)["value"]

    def alive(self):
        return self.p.poll() is None

    def stop(self):
        if self.log:
            print("stopped", self.p.pid, file=self.log, flush=True)
        self.p.stdin.close()
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


class ProcEnv(PooledEnv):
    def __init__(self, pool, seed):
        super().__init__(pool)
        self.seed = seed

    def begin(self, worker):
        return Observation(str(worker.call(op="new", seed=self.seed)))

    def act(self, worker, action):
        return Observation(str(worker.call(op="add", n=int(action))))


def proc_pool(size):
    return EnvPool(Proc, size, stop=Proc.stop, alive=Proc.alive)


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_killed_worker_process_is_restarted_and_the_result_equals_an_uninterrupted_episode():
    actions = ["3", "1", "4", "1", "5"]
    with proc_pool(1) as pool:
        env = ProcEnv(pool, 9)
        reference = [env.reset().text] + [env.step(a).text for a in actions]
        env.close()
        env = ProcEnv(pool, 9)
        got = [env.reset().text] + [env.step(a).text for a in actions[:3]]
        pid = pool.workers[0].p.pid
        os.kill(pid, signal.SIGKILL)
        pool.workers[0].p.wait()
        got += [env.step(a).text for a in actions[3:]]
        assert got == reference and pool.workers[0].p.pid != pid
        assert pool.stats["restarts"] == 1 and pool.stats["replayed_steps"] == 3


def test_close_stops_every_worker_process():
    pool = proc_pool(3)
    envs = [ProcEnv(pool, s) for s in range(4)]  # one more than workers: shared, still only 3 processes
    for env in envs:
        env.reset()
        env.step("2")
    pids = [w.p.pid for w in pool.workers]
    assert len(set(pids)) == 3 and not any(map(gone, pids))
    pool.close()
    assert all(map(gone, pids)) and pool.workers == []
    with pytest.raises(BenchmarkError, match="closed"):
        ProcEnv(pool, 1).reset()


def test_workers_are_stopped_at_interpreter_exit(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import test_envpool as t
        from evolver import EnvPool
        log = open({str(tmp_path / "log")!r}, "w")
        pool = EnvPool(lambda: t.Proc(log), 2, stop=t.Proc.stop, alive=t.Proc.alive)
        envs = [t.ProcEnv(pool, s) for s in (1, 2)]
        for env in envs:
            env.reset()
        print(" ".join(str(w.p.pid) for w in pool.workers))
    """)  # no close(): atexit stops them
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2 and all(map(gone, pids))
    assert sorted(int(line.split()[1]) for line in (tmp_path / "log").read_text().splitlines()) == sorted(pids)
