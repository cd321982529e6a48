"""Pairs mined from a store of hand-made episodes: episode pairs for DPO, first divergences for Step-DPO."""
from evolver import Store
from evolver_preference.mining import episode_pairs, load_episodes, mine, step_pairs
from prefdata import episode, multi_step, single_step


def store_with(tmp_path, *groups):
    store = Store(tmp_path / "evolver.duckdb")
    for g in groups:
        store.add_episodes(g)
    return store


def test_episode_pairs_rank_by_gap_dedupe_and_respect_min_gap(tmp_path):
    extra = [episode("letters/train/a0", 1.0, ["aaaa"], seed=7, error="boom"),  # errors never count
             episode("letters/dev/a0", 0.0, ["zzzz"], seed=8, split="dev")]  # held-out splits stay out
    with store_with(tmp_path, single_step(), extra) as store:
        eps = load_episodes(store)
        assert len(eps) == 6 and all(e.task.split == "train" and not e.error for e in eps)
        pairs = episode_pairs(eps)
        a0 = [p for p in pairs if p.task_id == "letters/train/a0"]
        # 1 vs 0 (the two 0s wrote the same answer: one pair), then the 0.5 gaps
        assert [(p.chosen[0].completion, p.rejected[0].completion) for p in a0] == \
            [("aaaa", "bbbb"), ("aaaa", "abab"), ("abab", "bbbb")]
        assert a0[0].score_chosen == 1.0 and a0[0].score_rejected == 0.0
        assert a0[0].prompt == [{"role": "system", "content": "Write letters."},
                                {"role": "user", "content": "Write the letter a (letters/train/a0)."}]
        assert [(p.chosen[0].completion, p.rejected[0].completion) for p in episode_pairs(eps, min_gap=0.6)] == \
            [("aaaa", "bbbb"), ("aaaa", "bcbc")]
        assert len(episode_pairs(eps, max_per_task=1)) == 2


def test_a_trajectory_pair_keeps_every_turn_and_needs_the_same_first_prompt(tmp_path):
    with store_with(tmp_path, multi_step()) as store:
        pairs = mine(store, "episode")
    assert len(pairs) == 1  # the episode from another first prompt pairs with nothing
    (p,) = pairs
    assert [t.completion for t in p.chosen] == ["a!", "b!", "c!"]
    assert [t.completion for t in p.rejected] == ["a?", "x!", "y!"]
    assert p.rejected[2].prompt[-1]["content"] == "after x"  # each turn under its own prompt


def test_step_pair_is_the_first_state_where_the_worse_episode_left_the_path(tmp_path):
    with store_with(tmp_path, multi_step(), single_step()) as store:
        eps = load_episodes(store)
    pairs = [p for p in step_pairs(eps) if p.task_id == "letters/train/b0"]
    # step 0: same state, same action "a" (different words): still on the path; step 1: "b" vs "x"
    assert len(pairs) == 1
    (p,) = pairs
    assert p.step == 1 and p.chosen[0].completion == "b!" and p.rejected[0].completion == "x!"
    assert [m["content"] for m in p.prompt] == ["Write letters.", "start", "after a"]
    # single-step episodes: the step pair is the episode pair
    a0 = [(p.chosen[0].completion, p.rejected[0].completion) for p in step_pairs(eps) if p.task_id.endswith("a0")]
    assert a0 == [("aaaa", "bbbb"), ("aaaa", "abab"), ("abab", "bbbb")]


def test_runs_and_programs_filter_the_source(tmp_path):
    other = single_step(run="r2")
    for e in other:
        e.program_id, e.seed = "p2", e.seed + 100
    with store_with(tmp_path, single_step(), other) as store:
        assert {e.run_id for e in load_episodes(store, runs=["r2"])} == {"r2"}
        assert {e.program_id for e in load_episodes(store, programs=["p1"])} == {"p1"}
        assert len(load_episodes(store, runs=["r1", "r2"])) == 12
        assert load_episodes(store, runs=["r1"], programs=["p2"]) == []
        assert len(load_episodes(store, split=None)) == 12
