"""Sampled play (evolver/backends/sampling.py): seeds per request and per episode, written and ranked choices."""
import sys
from pathlib import Path

from evolver.backends.base import Backend
from evolver.backends.sampling import SampledBackend
from evolver.backends.scripted import ScriptedBackend
from evolver.evaluate import Job, evaluate_many
from evolver.harness import program_context
from evolver.seeding import seed_files
from evolver.programs import content_hash
from evolver.types import ChoiceRequest, ChoiceResult, GenRequest, GenResult, Message, Program

sys.path.insert(0, str(Path(__file__).parent))
import toybench  # noqa: E402


def coin_rule(req):
    """The toy answer, right (UPPERCASE) on about half of the sampled seeds, never when greedy."""
    word = toybench.make_rule()(req)
    return word.upper() if req.temperature > 0 and req.seed % 2 == 0 else word.lower()


def test_requests_are_sampled_with_seeds_of_their_own():
    inner = ScriptedBackend(rule=lambda r: "x", model="m")
    b = SampledBackend(inner, 0.7)
    msg = [Message("user", "hi")]
    b.generate([GenRequest(msg, seed=5), GenRequest(msg, seed=5), GenRequest(msg, seed=6), GenRequest(msg)])
    seeds = [c.seed for c in inner.calls]
    assert all(c.temperature == 0.7 for c in inner.calls)
    assert seeds[0] == seeds[1] != seeds[2] and seeds[3] == 4  # no seed given: the request counter
    assert SampledBackend(inner, 0.7, seed=1).generate([GenRequest(msg, seed=5)]) and inner.calls[-1].seed != seeds[0]
    assert b.model == "m~sampled(t=0.7)" and SampledBackend(inner, 1.0, seed=3).model == "m~sampled(t=1,seed=3)"


def test_a_written_choice_is_written_by_a_sampled_generation():
    inner = ScriptedBackend(rule=lambda r: "take apple", model="m")
    res = SampledBackend(inner, 0.7).choose([ChoiceRequest([Message("user", "?")], ["go north", "take apple"],
                                                           write=True, seed=9)])
    assert res[0].index == 1 and inner.calls[-1].temperature == 0.7 and inner.calls[-1].seed is not None
    assert inner.choice_calls == []  # not the inner backend's own (greedy) choice


class Ranker(Backend):
    """Scores options like a local backend: option 0 likely, the others less so."""
    name, model, scores_options = "ranker", "r", True

    def __init__(self):
        self.generated, self.ranked = [], []

    def generate(self, requests):
        self.generated += requests
        return [GenResult("c") for _ in requests]

    def choose(self, requests):
        self.ranked += requests
        return [ChoiceResult(index=0, scores=[-0.1, -0.5, -0.6]) for _ in requests]


def test_a_ranked_choice_is_drawn_from_the_option_scores():
    req = [ChoiceRequest([Message("user", "?")], ["a", "b", "c"], seed=s) for s in range(200)]
    picks = [r.index for r in SampledBackend(Ranker(), 0.5).choose(req)]
    assert picks == [r.index for r in SampledBackend(Ranker(), 0.5).choose(req)]  # seeded
    assert picks.count(0) > picks.count(1) > 0 and picks.count(2) > 0  # softmax(scores / 0.5)
    assert {r.index for r in Ranker().choose(req)} == {0}  # the greedy choice
    # a written choice is not left to the inner backend's own (greedy) writing, even when it scores options
    ranker = Ranker()
    written = SampledBackend(ranker, 0.5).choose([ChoiceRequest([Message("user", "?")], ["a", "b", "c"], write=True)])
    assert written[0].index == 2 and ranker.ranked == [] and ranker.generated[0].temperature == 0.5


def seed_program(tmp_path):
    root = tmp_path / "seed"
    seed_files(into=root)
    return Program("seed", "", str(root), content_hash(root), {})


def test_the_evaluator_seeds_each_episode_so_samples_repeat_whatever_shares_the_batch(tmp_path):
    bench = toybench.UpperBench()
    tasks = bench.tasks("dev") + bench.tasks("test")
    ctx = program_context(seed_program(tmp_path))
    sampler = SampledBackend(ScriptedBackend(rule=coin_rule), 0.7)
    together = evaluate_many([(ctx, tasks, s) for s in range(4)], bench, sampler)
    scores = [[e.score for e in eps] for eps in together]
    assert len({tuple(s) for s in scores}) > 1 and 0 < sum(map(sum, scores)) < 32  # the seeds play differently
    alone = evaluate_many([(ctx, tasks[3:], 2)], bench, SampledBackend(ScriptedBackend(rule=coin_rule), 0.7))
    assert [e.score for e in alone[0]] == scores[2][3:]  # the same episodes, in another batch
    greedy = evaluate_many([(ctx, tasks, s) for s in range(2)], bench, ScriptedBackend(rule=coin_rule))
    assert all(e.score == 0.0 for eps in greedy for e in eps)


class CountingCalls(ScriptedBackend):
    """Records the size of every generate call."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.batches: list[int] = []

    def generate(self, requests):
        self.batches.append(len(requests))
        return super().generate(requests)


def test_greedy_and_sampled_jobs_of_one_engine_share_each_call_and_play_as_apart(tmp_path):
    bench = toybench.UpperBench()
    tasks = bench.tasks("dev") + bench.tasks("test")
    ctx = program_context(seed_program(tmp_path))
    engine = CountingCalls(rule=coin_rule)
    sampled = SampledBackend(engine, 0.7)
    together = evaluate_many([Job(ctx, tasks, 0), Job(ctx, tasks, 1, backend=sampled, purpose="baseline")],
                             bench, engine)
    # one generate call per round for both jobs: the largest batch holds both jobs' episodes
    assert max(engine.batches) == 2 * len(tasks)
    assert all(e.score == 0.0 for e in together[0]) and {e.purpose for e in together[1]} == {"baseline"}
    assert together[1][0].model == sampled.model != together[0][0].model
    greedy = evaluate_many([(ctx, tasks, 0)], bench, ScriptedBackend(rule=coin_rule))
    alone = evaluate_many([(ctx, tasks, 1)], bench, SampledBackend(ScriptedBackend(rule=coin_rule), 0.7))
    assert [e.score for e in together[0]] == [e.score for e in greedy[0]]
    assert [e.score for e in together[1]] == [e.score for e in alone[0]] and sum(e.score for e in alone[0]) > 0


def test_written_choices_lower_to_the_same_generations_through_every_wrapper():
    from evolver.run import CountingBackend
    engine = ScriptedBackend(rule=lambda r: "take apple", model="m")
    counted = CountingBackend(engine, counter := {}, "executor")
    req = [ChoiceRequest([Message("user", "?")], ["go north", "take apple"], write=True, seed=4)]
    low = SampledBackend(counted, 0.5).lowered(req)
    assert low.engine is engine and low.gens[0].temperature == 0.5 and low.gens[0].drafts == ["go north", "take apple"]
    (res,) = low.finish(engine.generate(low.gens))
    assert res.index == 1 and counter["executor"] > 0
    ranked = [ChoiceRequest([Message("user", "?")], ["a", "b"])]
    assert ScriptedBackend(rule=lambda r: "a").lowered(ranked) is None  # its own choose: called directly
