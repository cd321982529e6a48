"""A judge-scored task's GRPO group: rollouts played as the trainer plays them (one evaluate_many call, the
group's rollouts told apart by their seeds), rewards from the judge, advantages from the plugin's estimator."""
import numpy as np

from evolver.evaluate import Job, evaluate_many
from evolver_grpo.advantages import estimate, zero_variance
from evolver_grpo.samples import collect
from judged import BAD, GOOD, ReplyBench, context, fair_judge, harness, make_run, player


def rollouts(run, tmp_path, bench):
    """Four rollouts of each task, the first the planted good one, grouped as ``GRPOTrainer.rollout`` does."""
    ctx, tasks = context(tmp_path), bench.tasks("train")
    texts = [GOOD, BAD, BAD, BAD]
    jobs = [Job(ctx, tasks, seed=100 + g, backend=player(t, f"rollout{g}")) for g, t in enumerate(texts)]
    per_job = evaluate_many(jobs, bench, None, run=run, store=run.store, purpose="grpo", use_cache=False,
                            harness_factory=harness)
    episodes, group_of = [], []
    for i, task in enumerate(tasks):
        for g in range(len(texts)):
            episodes.append(per_job[g][i])
            group_of.append(f"0:0:{task.id}")
    return episodes, group_of


def test_the_judges_reward_gives_the_good_rollout_the_positive_advantage(tmp_path):
    run = make_run(tmp_path, fair_judge)
    try:
        episodes, group_of = rollouts(run, tmp_path, ReplyBench(n=2))
        trajs, _ = collect(episodes, group_of)
        assert not zero_variance(trajs)
        advs = estimate("grpo", trajs)
        for k, ep in enumerate(episodes):
            good = GOOD.split(":")[0] in ep.steps[0].output
            assert trajs[k].rewards["score"] == (1.0 if good else 1 / 3)  # three bad ones tie for last
            assert (advs[k] > 0).all() if good else (advs[k] < 0).all()
        assert len(run.store.judgements(run.id)) == 2  # one call per group
    finally:
        run.close()


def test_without_the_rubric_the_same_group_has_no_signal(tmp_path):
    """The environment scores every reply 0: the judge is what tells the rollouts apart."""
    run = make_run(tmp_path, fair_judge)
    try:
        episodes, group_of = rollouts(run, tmp_path, ReplyBench(n=2, rubric=False))
        trajs, _ = collect(episodes, group_of)
        assert len(zero_variance(trajs)) == 2
        assert all(np.all(a == 0) for a in estimate("grpo", trajs))
    finally:
        run.close()


def letter_judge(request) -> str:
    """More letters 'a' is better: a fair judge of whatever a random model writes."""
    from judged import attempts

    return "\n".join(f"Attempt {k}: {min(10, a.split('->')[0].count('a'))}"
                     for k, a in enumerate(attempts(request), 1))


def test_the_trainers_rollouts_of_a_task_are_judged_as_one_group(tmp_path, tiny_dir):
    """The trainer's own rollout and collect: each task's group of rollouts is one judge call, and the
    rewards the advantages see are the judge's."""
    from pathlib import Path

    from evolver import plugins
    from evolver.config import Config, RoleConfig
    from evolver.seeding import ensure_seed
    from evolver.programs import ProgramRepo
    from evolver.run import Run
    from evolver.store import Store
    from evolver_grpo.trainer import GRPOTrainer
    from letterbench import LetterBench

    class JudgedLetters(LetterBench):
        def rubric(self, task):
            return "The more letters a the attempt writes, the better."

    plugins.load_local(Path(__file__).resolve().parent / "letterbench.py")
    roles = {r: RoleConfig(backend="transformers", model=str(tiny_dir), options={"dtype": "fp32"})
             for r in ("executor", "proposer", "builder")}
    roles["judge"] = RoleConfig(backend="scripted", model="judge-script", options={"rule": letter_judge})
    cfg = Config(benchmark="letters", benchmark_options={}, store=str(tmp_path / "store"), roles=roles,
                 plugins={"grpo": {"max_new_tokens": 6, "autocast": False, "group_size": 4}})
    run = Run(cfg, Store(tmp_path / "store" / "evolver.duckdb"), ProgramRepo(tmp_path / "store"))
    try:
        run.record()
        ensure_seed(run)
        run._benchmark = JudgedLetters()
        trainer = GRPOTrainer(run, dict(run.config.plugins["grpo"]))
        trainer.setup()
        episodes, group_of = trainer.rollout(0, trainer.tasks[:2])
        trajs, _ = trainer._collect(episodes, group_of)
        rows = run.store.judgements(run.id)
        assert len(rows) == 2 and all(len(r["episode_ids"]) == 4 and r["calls"] == 2 for r in rows)
        reward = {i: x for r in rows for i, x in zip(r["episode_ids"], r["rewards"])}
        assert [t.rewards["score"] for t in trajs] == [reward[e.id] for e in episodes]
        advs = estimate("grpo", trajs)
        better = [(a, b) for a in range(len(trajs)) for b in range(len(trajs))
                  if group_of[a] == group_of[b] and trajs[a].rewards["score"] > trajs[b].rewards["score"]]
        assert better, [t.rewards for t in trajs]  # the random model's rollouts differ in their letters a
        assert all(advs[a][0] > advs[b][0] for a, b in better)
    finally:
        run.close()
