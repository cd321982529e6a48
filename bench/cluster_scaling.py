"""Episodes on a Ray cluster against the in-process path: scaling with workers, and the overhead at equal work.

Scaling (default): a scripted executor that sleeps ``--latency`` seconds per batched call stands in for a
model replica (the sleep is the model's batched step; nothing else is simulated). The seed program plays
``--episodes`` episodes of the core ``basic`` benchmark (kb-hops: up to 8 calls each) with at most
``--max-live`` episodes per replica (harnesses in-process unless ``--sandbox``), once in this process (one replica) and once per worker count on a
local Ray cluster. The driver stores every episode, as in a run; its share of the wall time in the
store's writer is printed, since that is where the driver limits growth.

Overhead (``--overhead``): the default evaluation size (twx-easy dev, 4 tasks per game) on the embedded
model, in-process against one Ray worker with the same CPUs: the same work, only the path differs.

    python bench/cluster_scaling.py --workers 1,2,4,8,16
    python bench/cluster_scaling.py --overhead
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def walk_rule(request):
    """Never answers the question, so each kb-hops episode runs to its step limit."""
    return "look around"


def timed(config, jobs_of, max_live: int, warm: bool = False) -> dict:
    from evolver.playing import play
    from evolver.workspace import open_run

    with open_run(config) as run:
        t0 = time.perf_counter()
        cluster = run.cluster
        start_s = time.perf_counter() - t0
        writes = {"s": 0.0}
        add = run.store.add_episodes

        def counted(episodes):
            t = time.perf_counter()
            add(episodes)
            writes["s"] += time.perf_counter() - t
        run.store.add_episodes = counted
        jobs = jobs_of(run)
        if warm:  # model loaded, JVM up, harness imported: on both paths, so only the path differs
            play(run, [(jobs[0][0], jobs[0][1][:1], 10_000)], max_live=max_live, use_cache=False)
        t0 = time.perf_counter()
        lists = play(run, jobs, store=run.store, max_live=max_live, use_cache=False)
        wall = time.perf_counter() - t0
        eps = [e for lst in lists for e in lst]
        steps = sum(len(e.steps) for e in eps)
        out = {"episodes": len(eps), "steps": steps, "wall_s": wall, "start_s": start_s,
               "writer": writes["s"] / wall, "score": sum(e.score for e in eps) / max(1, len(eps)),
               "workers": len(cluster.workers) if cluster else 0}
    return out


def scaling(args) -> None:
    import ray

    from evolver.config import Config, RoleConfig

    counts = [int(n) for n in args.workers.split(",")]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    roles = {r: RoleConfig(backend="scripted", options={"rule": walk_rule, "latency_s": args.latency})
             for r in ("executor", "proposer", "builder", "judge")}

    def config(folder, cluster):
        return Config(benchmark="basic", benchmark_options={"categories": ["kb-hops"]}, store=str(folder),
                      roles=roles, proposers=[], loop={"monitor": "off", "sandbox_harness": args.sandbox},
                      cluster=cluster)

    def jobs_of(run):
        from evolver.seeding import ensure_seed

        ctx = run.context(ensure_seed(run))
        tasks = run.benchmark.tasks("dev")
        seeds = -(-args.episodes // len(tasks))
        return [(ctx, tasks, s) for s in range(seeds)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        r = timed(config(Path(tmp, "here"), {}), jobs_of, args.max_live)
        rows.append(("in-process (1 replica)", r))
        for n in counts:
            cluster = {"engine": "ray", "workers": n, "cpus_per_worker": 2 / max(counts) / 2}
            r = timed(config(Path(tmp, f"ray{n}"), cluster), jobs_of, args.max_live)
            rows.append((f"ray, {n} worker{'s' * (n > 1)}", r))
    ray.shutdown()
    base = rows[1][1]
    print(f"\n{rows[0][1]['episodes']} episodes ({rows[0][1]['steps']} model calls), {args.latency:.2f} s per "
          f"batched call, at most {args.max_live} episodes live per replica; os.cpu_count()={os.cpu_count()}\n")
    print("| path | episodes/min | vs 1 worker | wall s | worker start s | driver in store writer |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        rate = r["episodes"] / r["wall_s"] * 60
        print(f"| {name} | {rate:.0f} | {base['wall_s'] / r['wall_s']:.2f}x | {r['wall_s']:.1f} | "
              f"{r['start_s']:.1f} | {r['writer']:.0%} |")


def overhead(args) -> None:
    from evolver.config import load_config

    def jobs_of(run):
        from evolver.seeding import ensure_seed

        ctx = run.context(ensure_seed(run))
        return [(ctx, run.benchmark.tasks("dev", per_category=args.per_category), 0)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        here = load_config(None, [f"store={tmp}/here", "proposers=[]"])
        rows.append(("in-process", timed(here, jobs_of, 32, warm=True)))
        there = load_config(None, [f"store={tmp}/ray", "proposers=[]", 'cluster.engine="ray"', "cluster.workers=1",
                                   "cluster.cpus_per_worker=2", "cluster.options={num_cpus = 2}"])
        rows.append(("ray, 1 worker", timed(there, jobs_of, 32, warm=True)))
    base = rows[0][1]["wall_s"]
    print(f"\n{rows[0][1]['episodes']} twx-easy dev episodes, embedded model, os.cpu_count()={os.cpu_count()}\n")
    print("(after one warm-up episode on each path; the cluster's start is apart)\n")
    print("| path | wall s | overhead | worker start s (apart) | steps | score |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['wall_s']:.1f} | {r['wall_s'] / base - 1:+.1%} | {r['start_s']:.1f} | {r['steps']} | "
              f"{r['score']:.3f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="1,2,4,8,16")
    p.add_argument("--episodes", type=int, default=256)
    p.add_argument("--latency", type=float, default=0.2)
    p.add_argument("--max-live", type=int, default=8)
    p.add_argument("--overhead", action="store_true")
    p.add_argument("--sandbox", action="store_true", help="sandboxed harnesses (CPU-bound: on a small machine "
                   "the cores, not the cluster, then set the limit)")
    p.add_argument("--per-category", type=int, default=4)
    args = p.parse_args()
    overhead(args) if args.overhead else scaling(args)


if __name__ == "__main__":
    main()
