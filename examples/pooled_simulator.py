"""A benchmark whose simulator holds one episode per process, played through ``EnvPool``.

Load it with ``--plugin`` (or list the file in ``EVOLVER_PLUGIN_PATH``)::

    evolver --plugin examples/pooled_simulator.py eval --benchmark vault

The game (find the key, open the chest) is tiny on purpose; what matters is its shape, the shape of a
game engine or emulator: a worker process (this file run with ``--worker``) speaks JSON lines and holds
one game at a time. The benchmark owns an ``EnvPool`` of ``pool_size`` such processes and sets
``max_live`` to it, so every live Env has a process of its own; the Envs keep their actions, so a
crashed process is restarted and the episode replayed (the game is deterministic). See
``evolver/envpool.py`` and the contract in ``evolver/benchmarks/base.py``.
"""
import json
import os
import random
import select
import subprocess
import sys

from evolver import SPLITS, Benchmark, EnvPool, Observation, PooledEnv, Task, hookimpl

ROOMS = ["hall", "library", "kitchen", "cellar", "study", "gallery", "pantry", "attic"]
TRINKETS = ["lamp", "coin", "book", "rope", "map"]
SPLIT_BASE = {"train": 0, "dev": 10_000, "test": 20_000}  # disjoint seed ranges: splits never share a task
REPLY_S = 30.0  # a worker that answers no step in this long is taken for dead


# -- the game, as the worker process runs it ---------------------------------------------------
class Game:
    """Rooms in a row; a key in one, a locked chest in another. Deterministic in ``seed``."""

    def __init__(self, seed: int):
        rng = random.Random(seed)
        self.rooms = rng.sample(ROOMS, rng.randint(3, 5))
        key_at, self.chest_at = rng.sample(range(len(self.rooms)), 2)
        self.items = {i: [] for i in range(len(self.rooms))}
        self.items[key_at].append("key")
        self.items[rng.randrange(len(self.rooms))].append(rng.choice(TRINKETS))
        self.at, self.carrying, self.opened, self.moves = 0, [], False, 0

    def look(self) -> str:
        here = self.items[self.at]
        exits = [d for d, i in (("west", self.at - 1), ("east", self.at + 1)) if 0 <= i < len(self.rooms)]
        text = f"You are in the {self.rooms[self.at]}. Exits: {', '.join(exits)}."
        if self.at == self.chest_at:
            text += " A chest stands here" + (", open." if self.opened else ", locked.")
        return text + (f" You see: {', '.join(here)}." if here else "")

    def actions(self) -> list[str]:
        out = ["look", "inventory"]
        out += ["go west"] * (self.at > 0) + ["go east"] * (self.at < len(self.rooms) - 1)
        out += [f"take {item}" for item in self.items[self.at]]
        return out + ["open chest"] * (self.at == self.chest_at and not self.opened)

    def score(self) -> float:
        return 1.0 if self.opened else 0.5 if "key" in self.carrying else 0.0

    def step(self, action: str) -> str:
        self.moves += 1
        words = action.strip().lower().split()
        if words in (["go", "west"], ["go", "east"]) and action.strip().lower() in self.actions():
            self.at += -1 if words[1] == "west" else 1
            return self.look()
        if words[:1] == ["take"] and len(words) == 2 and words[1] in self.items[self.at]:
            self.items[self.at].remove(words[1])
            self.carrying.append(words[1])
            return f"Taken: {words[1]}."
        if words == ["open", "chest"] and self.at == self.chest_at and not self.opened:
            if "key" not in self.carrying:
                return "The chest is locked."
            self.opened = True
            return "The key turns. The chest is open: you win."
        if words == ["look"]:
            return self.look()
        if words == ["inventory"]:
            return f"You carry: {', '.join(self.carrying) or 'nothing'}."
        return f"You can't {action.strip()!r} here."  # a bad action: said so, score unchanged

    def observation(self, text: str) -> dict:
        return {"text": f"{text} (move {self.moves})", "actions": [] if self.opened else self.actions(),
                "score": self.score(), "done": self.opened,
                "info": {"won": self.opened, "look": self.look(),
                         "inventory": ", ".join(self.carrying) or "nothing"}}

    def gold(self) -> list[str]:
        """The shortest solution: walk to the key, take it, walk to the chest, open it."""
        key_at = next(i for i, items in self.items.items() if "key" in items)
        walk = lambda a, b: ["go east" if b > a else "go west"] * abs(b - a)  # noqa: E731
        return walk(0, key_at) + ["take key"] + walk(key_at, self.chest_at) + ["open chest"]


def serve(stdin=sys.stdin, stdout=sys.stdout) -> None:
    """The worker: one game at a time, a JSON line in ({"op": "new", "seed": N} or {"op": "step",
    "action": A}), one out (the observation, or {"error": ...})."""
    game = None
    for line in stdin:
        try:
            msg = json.loads(line)
            if msg["op"] == "new":
                game = Game(int(msg["seed"]))
                reply = game.observation(game.look())
            elif game is None:
                reply = {"error": "no game: send {'op': 'new'} first"}
            else:
                reply = game.observation(game.step(str(msg["action"])))
        except (ValueError, KeyError, TypeError) as exc:
            reply = {"error": repr(exc)}
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()


# -- the benchmark's side ----------------------------------------------------------------------
class Simulator:
    """One worker process. Its own session, so Ctrl-C reaches only the evaluator, which then stops it."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)

    def call(self, **msg) -> Observation:
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        if not select.select([self.proc.stdout], [], [], REPLY_S)[0]:
            self.proc.kill()  # hung: dead to the pool, which restarts it and replays the episode
            raise TimeoutError(f"the simulator answered nothing in {REPLY_S:.0f}s")
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError("the simulator exited")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"the simulator refused {msg}: {reply['error']}")
        return Observation(**reply)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self.proc.stdin.close()  # end of input ends the worker's loop
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class VaultEnv(PooledEnv):
    def __init__(self, pool: EnvPool, task: Task):
        super().__init__(pool)
        self.task = task

    def begin(self, worker: Simulator) -> Observation:
        return worker.call(op="new", seed=self.task.seed)

    def act(self, worker: Simulator, action: str) -> Observation:
        return worker.call(op="step", action=action)


class VaultBenchmark(Benchmark):
    name = "vault"
    categories = ["vault"]
    max_steps = 16  # gold paths are at most 9 steps
    harness_hints = {"preset": "text-game"}

    def __init__(self, pool_size: int = 2, max_replay: int = 200):
        self.pool = EnvPool(Simulator, pool_size, stop=Simulator.stop, alive=Simulator.alive,
                            max_replay=max_replay)
        self.max_live = pool_size  # one process per live Env: no sharing, replay only after a crash

    def tasks(self, split: str, per_category: int | None = None) -> list[Task]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}")
        out = []
        for i in range(per_category or 20):
            seed = SPLIT_BASE[split] + i
            game = Game(seed)
            out.append(Task(id=f"vault/{split}/{i}", benchmark=self.name, split=split, category="vault",
                            seed=seed, gold=game.gold(),
                            prompt=f"Vault {seed}: find the key and open the chest. {game.look()}"))
        return out

    def env(self, task: Task) -> VaultEnv:
        return VaultEnv(self.pool, task)

    def close(self) -> None:
        self.pool.close()


@hookimpl
def register_benchmarks(register):
    register("vault", VaultBenchmark, description="a text game in worker processes behind EnvPool (example plugin)")


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    serve()
