"""How much a mined skill knows, with no model: a player that types the skill's "Next:" move (else a
random valid action not yet tried in that state) against the random player, on the same dev tasks.

    python bench/mined_notes.py [--benchmark twx] [--demos 20] [--random-rollouts 0] [--sweeps 1] [--dev 10] [--seeds 0]
                                [--option KEY=JSON ...]

The skill is mined (evolver_experience.mining) from ``--demos`` demonstrations per category of
training tasks and ``--random-rollouts`` random-play episodes per category of other training tasks
(rewards only; ``--sweeps`` passes over them, each after the first guided by the notes mined so far). Prints per-category mean score for the random player and the note follower, over the
``--seeds`` of the random choices (the random player's, and the follower's when no note names a move:
each its own stream, so a change to the notes leaves the random player's games as they were), and the
follower's paired gain over the random player with its 95% interval (evolver.gate.paired_bootstrap,
each task's seeds averaged).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from evolver import Episode, Step, plugins
from evolver.gate import paired_bootstrap
from evolver_experience import mining
from evolver_experience.notes import observe


def play(bench, task, choose, max_steps: int) -> Episode:
    env = bench.env(task)
    ep = Episode(task=task, program_id="bench", program_hash="", model="script", seed=0, purpose="mine")
    try:
        obs = env.reset()
        transcript = f"{task.prompt}\n\n{obs.text}"
        tried: set = set()
        for _ in range(max_steps):
            if obs.done:
                break
            action = choose(transcript, obs, tried)
            tried.add((obs.text, action))
            obs = env.step(action)
            transcript += f"\n> {action}\n{obs.text}"
            ep.steps.append(Step(index=len(ep.steps), prompt="", output=action, action=action,
                                 observation=obs.text, reward=obs.score))
        ep.score, ep.won = obs.score, bool((obs.info or {}).get("won", obs.score >= 1.0))
    finally:
        env.close()
    return ep


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--benchmark", default="twx")
    ap.add_argument("--suite", default="twx-easy")
    ap.add_argument("--demos", type=int, default=20)
    ap.add_argument("--random-rollouts", type=int, default=0)
    ap.add_argument("--sweeps", type=int, default=1,
                    help="passes over the random-rollout tasks, each after the first guided by the notes so far")
    ap.add_argument("--epsilon", type=float, default=0.3, help="a guided sweep's share of random moves")
    ap.add_argument("--dev", type=int, default=10)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds of the random choices; scores are averaged")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=JSON",
                    help="a benchmark option (repeatable): --option env='\"Blackjack-v1\"' for the gym benchmark")
    args = ap.parse_args()
    opts = {"suite": args.suite} if args.benchmark == "twx" else {}
    for item in args.option:
        key, _, value = item.partition("=")
        opts[key] = json.loads(value)
    bench = plugins.make("benchmark", args.benchmark, **opts)
    rng, rng_follow = random.Random(0), random.Random(0)
    limit = getattr(bench, "max_steps", 20) or 20

    def rand(_t, obs, tried, pick=rng):
        fresh = [a for a in obs.actions if (obs.text, a) not in tried] or obs.actions
        return pick.choice(fresh)

    t0 = time.time()
    train = bench.tasks("train", per_category=args.demos + args.random_rollouts)
    by_cat: dict = {}
    for t in train:
        by_cat.setdefault(t.category, []).append(t)
    demo_tasks = [t for ts in by_cat.values() for t in ts[:args.demos]]
    eps = mining.demonstrated(bench, demo_tasks)
    explore = [t for ts in by_cat.values() for t in ts[args.demos:]]
    eps += mining.explored_sweeps(bench, explore, args.sweeps, epsilon=args.epsilon) if explore else []
    cases = mining.merge(mining.mine(eps, bench))
    folder = Path(tempfile.mkdtemp())
    info = mining.write_mined_skill(folder, "mined-moves", cases, len(eps), sum(e.won for e in eps))
    data = observe.load(folder / "mined-moves" / mining.DATA_FILE)
    print(f"mined {info} from {len(eps)} episodes in {time.time() - t0:.1f} s", flush=True)

    calls = [0, 0.0]

    def follow(transcript, obs, tried):
        s = time.perf_counter()
        fresh = [a for a in obs.actions if (obs.text, a) not in tried] or obs.actions  # the harness's loop guard
        note = observe.note(transcript, fresh, data)
        calls[0] += 1
        calls[1] += time.perf_counter() - s
        for line in note.splitlines():
            if line.startswith("Next: "):
                move = line[6:].rstrip(".")
                if move in obs.actions and (obs.text, move) not in tried:
                    return move
        return rand(transcript, obs, tried, rng_follow)

    dev = bench.tasks("dev", per_category=args.dev)
    rows: dict = {}
    per_task: dict = {}
    for seed in [int(s) for s in args.seeds.split(",")]:
        rng.seed(seed)
        rng_follow.seed(seed)
        for t in dev:
            r = play(bench, t, rand, t.max_steps or limit).score
            f = play(bench, t, follow, t.max_steps or limit).score
            rows.setdefault(t.category, []).append((r, f))
            per_task.setdefault(t.id, []).append((r, f))
    print(f"{'category':14} {'random':>8} {'mined notes':>12}")
    for cat, pairs in rows.items():
        print(f"{cat:14} {sum(p[0] for p in pairs) / len(pairs):8.3f} {sum(p[1] for p in pairs) / len(pairs):12.3f}")
    allp = [p for ps in rows.values() for p in ps]
    print(f"{'mean':14} {sum(p[0] for p in allp) / len(allp):8.3f} {sum(p[1] for p in allp) / len(allp):12.3f}")
    diff, low, high = paired_bootstrap([[f for _, f in v] for v in per_task.values()],
                                       [[r for r, _ in v] for v in per_task.values()])
    print(f"notes - random: {diff:+.3f} [{low:+.3f}, {high:+.3f}] on {len(per_task)} tasks (paired, 95%)")
    print(f"note: {calls[0]} calls, {1000 * calls[1] / max(1, calls[0]):.1f} ms each in-process")
    bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
