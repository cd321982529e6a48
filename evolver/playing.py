"""Playing programs on tasks: each program with its own executor, programs that share weights in one
lockstep, and the per-task values that paired tests compare. The loop, the final test and the tools
that evaluate a program all play through here.
"""
from __future__ import annotations

import dataclasses

from evolver.backends.sampling import SampledBackend
from evolver.evaluate import Job, evaluate_many, summarize
from evolver.judge import Judging
from evolver.run import Run
from evolver.seeding import SEED_ID
from evolver.types import Program


def splits(run: Run) -> dict[str, list]:
    lc, bench = run.config.loop, run.benchmark
    return {"train": bench.tasks("train", per_category=max(lc.train_per_category * 4, 8)),
            "dev": bench.tasks("dev", per_category=lc.dev_per_category),
            "test": bench.tasks("test", per_category=lc.test_per_category)}


def executor(run: Run, program: Program, temperature: float | None = None):
    """The executor as ``program`` plays in the loop (:meth:`Run.executor_for`), sampled at ``temperature``
    (None: the executor role's; 0 plays greedy, as the harness asks)."""
    t = run.config.role("executor").temperature if temperature is None else temperature
    backend = run.executor_for(program)
    return SampledBackend(backend, t) if t > 0 else backend


def play(run: Run, jobs: list, temperature: float | None = None, **kw) -> list[list]:
    """:func:`evaluate_many` with each program's own executor (:func:`executor`, at the job's
    ``temperature`` or else this one): programs that play with the same weights share one lockstep,
    greedy and sampled alike; a trained program plays with its checkpoint. Harnesses run sandboxed
    (``loop.sandbox_harness``, see :func:`evaluate_many`)."""
    jobs = [Job.of(job) for job in jobs]
    groups: dict[str | None, list[int]] = {}
    for j, job in enumerate(jobs):
        groups.setdefault(run.checkpoint_of(job.ctx.program), []).append(j)
    out: list[list] = [[] for _ in jobs]
    progress, done = kw.pop("progress", None), 0
    # One judging across the checkpoints' calls: a judge-scored task's episodes are ranked together.
    judging = Judging.of(run.benchmark, [t for job in jobs for t in job.tasks], run, store=kw.get("store"))
    total = sum(len(job.tasks) for job in jobs)
    for members in groups.values():
        size = sum(len(jobs[j].tasks) for j in members)
        shown = (lambda n, _t, base=done: progress(base + n, total)) if progress else None
        made: dict[float | None, object] = {}  # one backend per temperature: its episodes batch as one
        for j in members:
            t = temperature if jobs[j].temperature is None else jobs[j].temperature
            if jobs[j].backend is None:
                if t not in made:
                    made[t] = executor(run, jobs[j].ctx.program, t)
                jobs[j] = dataclasses.replace(jobs[j], backend=made[t])
        lists = evaluate_many([jobs[j] for j in members], run.benchmark, None, run=run, progress=shown,
                              judging=judging, **kw)
        for j, eps in zip(members, lists):
            out[j] = eps
        done += size
    if judging:
        judging.finish()
    return out


def episodes_per_task(run: Run) -> int:
    """Episodes per task of a dev or test evaluation (``loop.dev_episodes_per_task``)."""
    n = run.config.loop.dev_episodes_per_task
    return n if n is not None else (3 if run.config.role("executor").temperature > 0 else 1)


def per_task(episodes) -> dict[str, dict[str, list[float]]]:
    """The values a paired test compares, per task: ``{"score": {task_id: [...]}, "success": {...}}``."""
    out: dict[str, dict[str, list[float]]] = {"score": {}, "success": {}}
    for e in episodes:
        out["score"].setdefault(e.task.id, []).append(e.score)
        out["success"].setdefault(e.task.id, []).append(float(e.won))
    return out


def evaluate_programs(run: Run, programs: list[Program], tasks, split: str, iteration: int,
                      purpose: str = "eval", extra: list[Job] = ()) -> tuple[list, list[dict], list[list]]:
    """Every program on ``tasks``, :func:`episodes_per_task` episodes per task (seeds episode_seed + k),
    all in one lockstep with the ``extra`` jobs. Returns the evaluations (stored), each program's
    :func:`per_task` values, and the episode lists of the ``extra`` jobs."""
    seeds = [run.config.loop.episode_seed + k for k in range(episodes_per_task(run))]
    ctxs = [run.context(p) for p in programs]
    jobs = [Job(ctx, tasks, s) for ctx in ctxs for s in seeds]
    lists = play(run, jobs + list(extra), seed=seeds[0], purpose=purpose, store=run.store,
                 progress=progress_status(run, split))
    evals, values = [], []
    for i, p in enumerate(programs):
        eps = [e for lst in lists[i * len(seeds):(i + 1) * len(seeds)] for e in lst]
        ev = summarize(p.id, split, eps)
        run.store.add_evaluation(run.id, iteration, ev)
        evals.append(ev)
        values.append(per_task(eps))
    return evals, values, lists[len(jobs):]


def progress_status(run: Run, label: str):
    """A progress callback that shows ``label done/total`` as the run's status."""
    def show(done: int, total: int) -> None:
        run.status = f"{label} {done}/{total}"
    return show

def planned(run: Run, data: dict) -> dict:
    """The most the loop itself will play under this configuration, said before it starts: episodes of
    the seed's dev evaluation, of every iteration (the parent's rollouts, each candidate's smoke episode
    and its whole dev split, as if no probe stopped it), of the final test (the seed and the best, or
    the frontier) and of the best-of-N baseline; and the model calls they can make, each episode up to
    its step limit (the calls a step limit counts: a harness's tool calls come on top). What proposers play themselves (a miner's demonstrations, a trainer's rollouts) is
    not counted: a proposer's plugin spends it."""
    cfg, bench = run.config.loop, run.benchmark
    k = episodes_per_task(run)
    dev, test = len(data["dev"]) * k, len(data["test"]) * k
    rollouts = min(len(data["train"]), cfg.train_per_category * max(1, len(bench.categories)))
    iteration = rollouts + cfg.candidates_per_iteration * (1 + dev)
    finals = 1 + (cfg.frontier_capacity if cfg.test_frontier else 1)
    tried = cfg.iterations * cfg.candidates_per_iteration
    baseline = (tried * len(data["dev"]) + len(data["test"])) if cfg.best_of_n else 0
    parts = {"seed dev": dev, "iterations": cfg.iterations * iteration, "final test": finals * test,
             "best-of-N": baseline}
    limit = max(1, getattr(bench, "max_steps", 1) or 1)

    def steps(tasks) -> int:
        return max((t.max_steps or limit for t in tasks), default=limit)
    calls = (dev + finals * test + baseline) * max(steps(data["dev"]), steps(data["test"])) + \
        cfg.iterations * iteration * max(steps(data["train"]), steps(data["dev"]))
    return {"episodes": sum(parts.values()), "parts": {k: v for k, v in parts.items() if v}, "calls": calls}


def plan_line(plan: dict) -> str:
    """What :func:`planned` says, as the run prints it before it starts."""
    parts = ", ".join(f"{k} {v}" for k, v in plan["parts"].items())
    return (f"plan: at most {plan['episodes']} episodes played by the loop ({parts}) and "
            f"{plan['calls']} model calls besides tool calls; proposers' own episodes are theirs")


def tries(run: Run) -> int:
    """Candidates that played dev so far, the ones stopped after the probe included: each was a try."""
    return sum(r["status"] in ("admitted", "discarded") for r in run.store.proposals(run.id))


def baseline_jobs(run: Run, dev: list, n: int) -> list[Job]:
    """The seed program sampled at ``loop.baseline_temperature`` with job seeds episode_seed + k, k < n."""
    cfg = run.config.loop
    ctx = run.context(run.repo.checkout(SEED_ID))
    return [Job(ctx, dev, cfg.episode_seed + k, purpose="baseline", temperature=cfg.baseline_temperature)
            for k in range(n)]
