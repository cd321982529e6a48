"""Judge-scored tasks (evolver/judge.py): a judge ranks a task's episodes together against the benchmark's
rubric; its rewards become their scores, and its calls, tokens and disagreement are in the store."""
import os
import sys
from pathlib import Path

import pytest

from evolver.evaluate import Job, evaluate_many
from evolver.judge import fit, judge_groups, kendall_distance, parse_scores, rank_rewards
from evolver.types import Episode, GenResult, Step

sys.path.insert(0, str(Path(__file__).parent))
import judged  # noqa: E402
from judged import (BAD, GOOD, ReplyBench, context, fair_judge, first_shown_judge, harness,  # noqa: E402
                    make_run, player)


def play(run, tmp_path, texts, bench=None, **kw):
    """Each text played by its own scripted executor on the same program and tasks (seeds 0, 1, ...): one
    group per task, as GRPO's rollouts and a lockstep of programs make."""
    ctx = context(tmp_path)
    jobs = [Job(ctx, (bench or ReplyBench()).tasks("dev"), seed=k, backend=player(t, f"player{k}"))
            for k, t in enumerate(texts)]
    return evaluate_many(jobs, bench or ReplyBench(), None, run=run, store=run.store, harness_factory=harness, **kw)


def test_a_planted_good_episode_ranks_first_and_the_call_is_stored(tmp_path):
    run = make_run(tmp_path, fair_judge)
    seen = []
    try:
        good, bad1, bad2 = play(run, tmp_path, [GOOD, BAD, BAD], on_episode=lambda e: seen.append(e.score))
        for i in range(2):  # each task is its own group
            assert good[i].score == 1.0 and good[i].rewards["score"] == 1.0
            assert bad1[i].score == bad2[i].score == 0.25  # the two bad ones tie for last: they share 0 and 0.5
            assert good[i].steps[-1].reward == 0.0  # the environment's own score stays in the trace
        assert sorted(seen) == sorted(e.score for eps in (good, bad1, bad2) for e in eps)  # announced once judged
        stored = {e.id: e.score for e in run.store.episodes(run_id=run.id)}
        assert stored[good[0].id] == 1.0 and stored[bad1[0].id] == 0.25
        rows = run.store.judgements(run.id)
        assert len(rows) == 2 and {r["task_id"] for r in rows} == {"replies/dev/0", "replies/dev/1"}
        row = next(r for r in rows if r["task_id"] == "replies/dev/0")
        assert row["episode_ids"] == [good[0].id, bad1[0].id, bad2[0].id]
        assert row["rewards"] == [1.0, 0.25, 0.25] and row["env_scores"] == [0.0, 0.0, 0.0]
        assert row["passes"] == [[9.0, 2.0, 2.0], [9.0, 2.0, 2.0]] and row["disagreement"] == 0.0
        assert row["error"] is None and row["calls"] == 2 and row["judge_model"] == "judge-script"
        assert row["prompt_tokens"] > 0 and row["completion_tokens"] > 0
        assert run.tokens["judge"] == sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows)
        from evolver.report import judge_lines

        text = "\n".join(judge_lines(run))
        assert "## Judge-scored tasks" in text and "2 groups ranked by judge-script in 4 requests" in text
        assert "disagreed by 0.00 on average" in text and "could not read: 0" in text
    finally:
        run.close()


def test_the_second_pass_shows_the_attempts_reversed_and_the_order_played_does_not_matter(tmp_path):
    run = make_run(tmp_path, fair_judge)
    try:
        bad1, bad2, good = play(run, tmp_path, [BAD, BAD, GOOD], bench=ReplyBench(n=1))
        assert (good[0].score, bad1[0].score, bad2[0].score) == (1.0, 0.25, 0.25)
        calls = run.backend("judge").inner.calls
        first, second = (judged.attempts(c) for c in calls)
        assert "GOOD" in first[2] and "GOOD" in second[0]  # last shown, then first shown
        assert run.store.judgements(run.id)[0]["disagreement"] == 0.0
    finally:
        run.close()


def test_a_judge_that_prefers_the_first_attempt_shown_disagrees_with_itself(tmp_path):
    run = make_run(tmp_path, first_shown_judge)
    try:
        good, bad1, bad2 = play(run, tmp_path, [GOOD, BAD, BAD], bench=ReplyBench(n=1))
        row = run.store.judgements(run.id)[0]
        # pairs (good, bad1) and (bad1, bad2) flip from strict to tied, (good, bad2) reverses: (0.5 + 1 + 0.5) / 3
        assert row["disagreement"] == pytest.approx(2 / 3)
        assert row["passes"] == [[10.0, 0.0, 0.0], [0.0, 0.0, 10.0]]
        assert good[0].score == bad2[0].score == 0.625 and bad1[0].score == 0.25  # position, not content
    finally:
        run.close()


def test_a_garbage_reply_gives_every_episode_the_same_reward_and_records_why(tmp_path):
    run = make_run(tmp_path, lambda req: "\x00 I think they are all fine ###")
    try:
        good, bad = play(run, tmp_path, [GOOD, BAD], bench=ReplyBench(n=1))
        assert good[0].score == bad[0].score == 0.5  # no signal, and no crash
        row = run.store.judgements(run.id)[0]
        assert row["passes"] == [None, None] and row["disagreement"] is None
        assert "scored 0 of 2 attempts" in row["error"] and row["rewards"] == [0.5, 0.5]
    finally:
        run.close()


def test_one_unreadable_pass_leaves_the_other_to_decide(tmp_path):
    replies = iter(["Attempt 1: 8\nAttempt 2: 3", "no idea"])
    run = make_run(tmp_path, lambda req: next(replies))
    try:
        good, bad = play(run, tmp_path, [GOOD, BAD], bench=ReplyBench(n=1))
        assert (good[0].score, bad[0].score) == (1.0, 0.0)
        row = run.store.judgements(run.id)[0]
        assert row["passes"][1] is None and row["disagreement"] is None and "scored 0 of 2" in row["error"]
    finally:
        run.close()


def test_a_lone_episode_is_scored_against_the_rubric_and_a_failed_one_keeps_zero(tmp_path):
    run = make_run(tmp_path, lambda req: "Attempt 1: 7")
    try:
        (alone,) = play(run, tmp_path, [GOOD], bench=ReplyBench(n=1))
        assert alone[0].score == pytest.approx(0.7)
        assert run.store.judgements(run.id)[0]["calls"] == 1  # one attempt has no order to reverse
    finally:
        run.close()
    task = ReplyBench(n=1).tasks("dev")[0]
    ok = Episode(task, "p", "h", "m", 0, steps=[Step(0, "", "fine", "fine", "read", reward=0.0)])
    crashed = Episode(task, "p", "h", "m", 1, steps=[Step(0, "", "GOOD", "GOOD", "read")], error="harness crashed")
    judge = judged.ScriptedBackend(rule=fair_judge)
    (v,) = judge_groups(judge, [(task, judged.RUBRIC, [ok, crashed])])
    assert v.rewards == [pytest.approx(0.2), 0.0] and len(judge.calls) == 1  # the crashed one is never shown
    assert v.passes == [[2.0, None]]
    assert "GOOD" not in judge.calls[0].messages[-1].content


def test_a_cached_episode_is_ranked_again_with_the_group_it_is_returned_in(tmp_path):
    run = make_run(tmp_path, fair_judge)
    try:
        ctx, tasks = context(tmp_path), ReplyBench(n=1).tasks("dev")
        bad = Job(ctx, tasks, seed=0, backend=player(BAD, "player0"))
        (first,) = evaluate_many([bad], ReplyBench(n=1), None, run=run, store=run.store, harness_factory=harness)
        assert first[0].score == pytest.approx(0.2)  # alone: 2 of 10
        again, good = evaluate_many([bad, Job(ctx, tasks, seed=1, backend=player(GOOD, "player1"))],
                                    ReplyBench(n=1), None, run=run, store=run.store, harness_factory=harness)
        assert again[0].cached and again[0].score == 0.0 and good[0].score == 1.0
        shown = judged.attempts(run.backend("judge").inner.calls[-1])
        assert len(shown) == 2 and any("go away" in a for a in shown)  # its steps were loaded to be shown
    finally:
        run.close()


def test_programs_with_different_weights_are_judged_in_one_group(tmp_path):
    """The loop plays each checkpoint's programs in an evaluate_many call of their own: a task's episodes
    are still ranked together (evolver.playing.play shares one judging across the calls)."""
    from evolver.config import RoleConfig
    from evolver.playing import play as loop_play

    run = make_run(tmp_path, fair_judge)
    rule = lambda req: GOOD if "Be kind." in req.messages[0].content else BAD  # noqa: E731
    run.config.roles["executor"] = RoleConfig(backend="scripted", model="base", options={"rule": rule})
    run._benchmark = ReplyBench(n=1)
    (run.workspace / "ckpt").mkdir(parents=True)
    (run.workspace / "ckpt" / "config.json").write_text("{}")
    try:
        seed = judged.program(tmp_path, "seed")
        trained = judged.program(tmp_path, "trained")
        (Path(trained.root) / "prompt.md").write_text("Be kind.")
        trained.manifest = {"model": "ckpt"}
        tasks = run.benchmark.tasks("dev")
        lists = loop_play(run, [Job(judged.program_context(p), tasks) for p in (seed, trained)], store=run.store)
        assert lists[1][0].model.endswith("ckpt") and lists[0][0].model == "base"  # two weights, two calls
        (row,) = run.store.judgements(run.id)
        assert row["episode_ids"] == [lists[0][0].id, lists[1][0].id] and row["rewards"] == [0.0, 1.0]
        assert (lists[0][0].score, lists[1][0].score) == (0.0, 1.0)
    finally:
        run.close()


def test_without_a_rubric_or_a_judge_the_environment_scores(tmp_path):
    run = make_run(tmp_path, fair_judge)
    try:
        eps = play(run, tmp_path, [GOOD, BAD], bench=ReplyBench(n=1, rubric=False))
        assert [e[0].score for e in eps] == [0.0, 0.0] and run.store.judgements(run.id) == []
        assert "judge" not in run.tokens  # never asked, never loaded
    finally:
        run.close()
    ctx = context(tmp_path, "q")
    eps = evaluate_many([(ctx, ReplyBench(n=1).tasks("dev"))], ReplyBench(n=1), player(GOOD, "x"))
    assert eps[0][0].score == 0.0


def test_replies_parse_robustly_and_rewards_rank():
    assert parse_scores("Attempt 2 - 7/10\nattempt #1: 8.5\nAttempt 3: 40", 3) == ([8.5, 7.0, 10.0], None)
    scores, error = parse_scores("Attempt 1: 9", 2)
    assert scores is None and "scored 1 of 2 attempts (none for attempt 2)" in error
    assert rank_rewards([3, 9, 3, 1]) == [0.5, 1.0, 0.5, 0.0]
    assert rank_rewards([4, 4]) == [0.5, 0.5] and rank_rewards([6]) == [0.6]
    assert kendall_distance([1, 2, 3], [3, 2, 1]) == 1.0 and kendall_distance([1, 2, 3], [0, 5, 9]) == 0.0


def test_a_long_attempt_is_cut_visibly_in_the_middle():
    text = " ".join(f"w{i}" for i in range(1000))
    cut = fit(text, 100, lambda t: len(t.split()))
    assert cut.startswith("w0 w1") and cut.endswith("w999")
    assert "more tokens cut]" in cut and len(cut.split()) < 130  # the cut is by characters: near the budget
    task = ReplyBench(n=1).tasks("dev")[0]
    long = Episode(task, "p", "h", "m", 0, steps=[Step(i, "", f"say {i}", f"say {i}", "ok " * 50) for i in range(200)])
    judge = judged.ScriptedBackend(rule=lambda req: "Attempt 1: 5", context_window=2048)
    (v,) = judge_groups(judge, [(task, judged.RUBRIC, [long])])
    assert "more tokens cut]" in judge.calls[0].messages[-1].content and v.prompt_tokens < 2048


def test_a_failed_judge_request_is_recorded_like_garbage(tmp_path):
    run = make_run(tmp_path, lambda req: GenResult(text="", error="context overflow"))
    try:
        good, bad = play(run, tmp_path, [GOOD, BAD], bench=ReplyBench(n=1))
        assert good[0].score == bad[0].score == 0.5
        assert "the judge failed: context overflow" in run.store.judgements(run.id)[0]["error"]
    finally:
        run.close()


# ------------------------------------------------------------------------------- slow: the embedded model
REAL_HOME = os.environ.get("EVOLVER_HOME") or str(Path.home() / ".cache" / "evolver")


@pytest.mark.slow
def test_the_embedded_model_judges_a_small_group(tmp_path, monkeypatch):
    monkeypatch.delenv("EVOLVER_MODEL_DIR", raising=False)
    monkeypatch.setenv("EVOLVER_HOME", REAL_HOME)  # the fetched model, not the tests' empty home
    run = make_run(tmp_path, None)
    run.config.roles["judge"] = judged.RoleConfig(backend="transformers")
    try:
        eps = play(run, tmp_path, [GOOD, BAD, BAD], bench=ReplyBench(n=1))
        assert all(0.0 <= e[0].score <= 1.0 for e in eps)
        (row,) = run.store.judgements(run.id)
        assert row["calls"] == 2 and row["episode_ids"] == [e[0].id for e in eps] and row["prompt_tokens"] > 0
        assert run.tokens["judge"] > 0
    finally:
        run.close()
