"""Ingest speed of Store.add_episodes against the executemany loop a user would otherwise write.

    .venv/bin/python bench/store_ingest.py [--episodes 5000] [--steps 20] [--baseline-episodes N]

Both paths write the same episodes (realistic 1-2 KB prompts) into fresh files with the same
schema, each in one transaction. The baseline can be run on fewer episodes (it takes about a
minute for the full set); its rate is then measured on that subset and marked as such.
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import string
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evolver.store import Store  # noqa: E402
from evolver.store_schema import dumps  # noqa: E402
from evolver.types import Episode, Step, Task  # noqa: E402


def make_episodes(n_episodes: int, n_steps: int, seed: int = 0) -> list[Episode]:
    rnd = random.Random(seed)
    words = ["".join(rnd.choices(string.ascii_lowercase, k=rnd.randint(2, 9))) for _ in range(2000)]
    text = " ".join(rnd.choices(words, k=200_000))
    eps = []
    for i in range(n_episodes):
        task = Task(id=f"cookingworld-{i}", benchmark="twx", split="dev", category="cookingworld", seed=i,
                    prompt=text[:300], gold=["open fridge", "take carrot"], meta={"level": 1})
        steps = []
        for j in range(n_steps):
            o = rnd.randrange(0, len(text) - 2500)
            steps.append(Step(index=j, prompt=text[o:o + rnd.randint(1000, 2000)], output="> take carrot",
                              action="take carrot", observation=text[o:o + 200], reward=j / n_steps,
                              prompt_tokens=400, completion_tokens=8,
                              tool_calls=[{"tool": "recall", "args": {"q": "carrot"}}] if j % 10 == 0 else [],
                              latency_s=0.05))
        eps.append(Episode(task=task, program_id="p1", program_hash="h1", model="smollm2", seed=i, steps=steps,
                           score=0.5, won=False, rewards={"valid": 0.9}, prediction="take carrot",
                           run_id="bench", purpose="eval"))
    return eps


def naive(path: Path, episodes: list[Episode]) -> None:
    """What one writes without thinking: executemany with one parameter tuple per row."""
    with Store(path) as store:  # for the schema only
        con = store._con
        now = datetime.now()
        ep_rows, st_rows = [], []
        for e in episodes:
            eid, t = uuid.uuid4().hex, e.task
            ep_rows.append((eid, e.run_id, e.cache_key, e.program_id, e.program_hash, e.model, t.benchmark, t.id,
                            t.split, t.category, e.seed, e.purpose, e.score, e.won, dumps(e.rewards), e.prediction,
                            dumps(t.gold), e.error, len(e.steps), sum(s.prompt_tokens for s in e.steps),
                            sum(s.completion_tokens for s in e.steps), e.wall_s, e.model_s, now,
                            dumps(dataclasses.asdict(t))))
            st_rows += [(eid, s.index, s.prompt, s.output, s.action, s.observation, s.reward, s.prompt_tokens,
                         s.completion_tokens, dumps(s.tool_calls), s.latency_s, s.error) for s in e.steps]
        con.execute("BEGIN")
        con.executemany(f"INSERT INTO episodes VALUES ({', '.join(['?'] * len(ep_rows[0]))})", ep_rows)
        con.executemany(f"INSERT INTO steps VALUES ({', '.join(['?'] * len(st_rows[0]))})", st_rows)
        con.execute("COMMIT")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=5000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=250, help="episodes per add_episodes call in the batched row")
    ap.add_argument("--baseline-episodes", type=int, default=None,
                    help="run the executemany baseline on this many episodes only (default: all)")
    args = ap.parse_args()
    episodes = make_episodes(args.episodes, args.steps)
    n_base = min(args.baseline_episodes or args.episodes, args.episodes)
    episodes2 = make_episodes(args.episodes, args.steps, seed=1)
    base_eps = make_episodes(n_base, args.steps, seed=2)
    mb = sum(len(s.prompt) + len(s.observation) for e in episodes for s in e.steps) / 1e6
    batch = max(1, args.batch)
    with tempfile.TemporaryDirectory() as d:
        # Timed from open to close: the close checkpoints (compresses) what the commits wrote to
        # the WAL, a cost a long run pays too, at the commit after the WAL passes 16 MB.
        t = time.perf_counter()
        with Store(Path(d) / "fast.duckdb") as store:
            store.add_episodes(episodes)
        fast = time.perf_counter() - t
        t = time.perf_counter()
        with Store(Path(d) / "batched.duckdb") as store:
            for i in range(0, len(episodes2), batch):
                store.add_episodes(episodes2[i:i + batch])
            n_rows = store.query("SELECT count(*) FROM steps")[1][0][0]
        batched = time.perf_counter() - t
        with Store(Path(d) / "batched.duckdb") as store:  # reads, on the 100k-step store
            reads = []
            for name, fn in (("cached(), all keys", lambda: store.cached([e.cache_key for e in episodes2])),
                             ("episodes(), no steps", lambda: store.episodes(run_id="bench")),
                             ("episodes(with_steps), 500 episodes",
                              lambda: store.episodes(ids=[e.id for e in episodes2[:500]], with_steps=True)),
                             ("episode(id prefix), one", lambda: store.episode(episodes2[-1].id[:8]))):
                t = time.perf_counter()
                fn()
                reads.append((name, time.perf_counter() - t))
        t = time.perf_counter()
        naive(Path(d) / "naive.duckdb", base_eps)
        slow = time.perf_counter() - t
    n_fast, n_slow = args.episodes * args.steps, n_base * args.steps
    assert n_rows == n_fast, (n_rows, n_fast)
    rate_fast, rate_batched, rate_slow = n_fast / fast, n_fast / batched, n_slow / slow
    note = "" if n_base == args.episodes else f"  (baseline measured on {n_slow:,} steps)"
    print(f"{args.episodes:,} episodes x {args.steps} steps = {n_fast:,} steps, "
          f"{mb:.0f} MB of prompt+observation text; open..close, fresh file each")
    print(f"{'path':<44}{'steps':>9}{'seconds':>9}{'steps/s':>10}{'vs naive':>10}")
    for name, n, sec, rate in (("Store.add_episodes, one call", n_fast, fast, rate_fast),
                               (f"Store.add_episodes, {batch} episodes per call", n_fast, batched, rate_batched),
                               ("executemany (naive)", n_slow, slow, rate_slow)):
        print(f"{name:<44}{n:>9,}{sec:>9.2f}{rate:>10,.0f}{rate / rate_slow:>9.0f}x")
    print("reads: " + ", ".join(f"{name} {sec * 1000:.0f} ms" for name, sec in reads))
    print(f"100k steps through add_episodes: {100_000 / rate_fast:.2f} s in one call, "
          f"{100_000 / rate_batched:.2f} s in batches (target < 5 s){note}")

if __name__ == "__main__":
    main()
