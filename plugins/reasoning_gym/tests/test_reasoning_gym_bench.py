"""The reasoning-gym benchmark: deterministic splits that never share a question, exact scoring."""
import pytest

from evolver.errors import BenchmarkError
from evolver_reasoning_gym.benchmark import ReasoningGym, extract_answer


@pytest.fixture(scope="module")
def bench():
    return ReasoningGym(datasets=["basic_arithmetic", "chain_sum"], size=20)


def test_splits_are_deterministic_disjoint_and_capped(bench):
    train, dev, test = (bench.tasks(s) for s in ("train", "dev", "test"))
    assert train and dev and test
    assert {t.id for t in bench.tasks("dev")} == {t.id for t in ReasoningGym(datasets=["basic_arithmetic", "chain_sum"],
                                                                             size=20).tasks("dev")}
    prompts = [{t.prompt for t in s} for s in (train, dev, test)]
    assert not (prompts[0] & prompts[1]) and not (prompts[0] & prompts[2]) and not (prompts[1] & prompts[2])
    capped = bench.tasks("train", per_category=3)
    assert [t.category for t in capped] == ["basic_arithmetic"] * 3 + ["chain_sum"] * 3


def test_scoring_gold_wrong_and_wordy_answers(bench):
    task = bench.tasks("dev", per_category=1)[0]
    env = bench.env(task)
    assert env.reset().text == task.prompt
    assert env.step(task.gold).score == 1.0
    env = bench.env(task)
    wrong = env.step("banana")
    assert wrong.score == 0.0 and wrong.done and wrong.info["won"] is False
    assert bench.env(task).step(f"Let me think. The answer is {task.gold}.").score == 1.0
    assert extract_answer("<answer> 42 </answer> trailing") == "42"


def test_unknown_dataset_is_named():
    with pytest.raises(BenchmarkError, match="no_such_generator"):
        ReasoningGym(datasets=["no_such_generator"])


def test_split_sizes_override_per_split():
    rg = ReasoningGym(datasets=["basic_arithmetic"], size=30, split_sizes={"train": 5})
    assert len(rg.tasks("train")) == 5 and 0 < len(rg.tasks("dev")) <= 30
    with pytest.raises(BenchmarkError, match="unknown splits"):
        ReasoningGym(datasets=["basic_arithmetic"], split_sizes={"val": 5})
