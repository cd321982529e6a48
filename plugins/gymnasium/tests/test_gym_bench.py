"""Gymnasium environments as evolver benchmarks from the configuration alone (evolver_gymnasium)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from evolver import BenchmarkError, plugins
from evolver.cli import cli

pytest.importorskip("gymnasium")
from evolver_gymnasium.benchmark import plain  # noqa: E402 - after the skip
LAKE = {"env": "FrozenLake-v1", "kwargs": {"is_slippery": False}, "action_names": ["left", "down", "right", "up"]}
CLIFF = {"env": "CliffWalking-v1", "action_names": ["up", "right", "down", "left"], "score_range": [-100, -13]}
TOY = str(Path(__file__).resolve().parents[3] / "tests" / "toybench.py")  # scripted roles only


@pytest.fixture(autouse=True)
def gym_loaded():
    """Registered by hand, as its entry point would be (the suite's EVOLVER_PLUGINS leaves it out)."""
    import evolver_gymnasium

    if plugins.manager().get_plugin("gymnasium") is None:
        plugins.manager().register(evolver_gymnasium, name="gymnasium")


def play(options: dict, actions: list[str]):
    bench = plugins.make("benchmark", "gym", **options)
    env = bench.env(bench.tasks("dev", 1)[0])
    obs = [env.reset()]
    for a in actions:
        obs.append(env.step(a))
    env.close()
    return obs


def test_frozen_lake_is_won_on_the_shortest_path_and_lost_in_a_hole():
    obs = play(LAKE, ["right", "right", "down", "down", "down", "right"])
    assert obs[0].text.splitlines()[0] == "[S]FFF" and obs[0].actions == LAKE["action_names"]
    assert "S[F]FF" in obs[1].text  # the player's cell, highlighted in the rendering, is in brackets
    assert obs[-1].done and obs[-1].score == 1.0 and obs[-1].info["won"] and "Reward 1." in obs[-1].text
    lost = play(LAKE, ["down", "right"])  # (1, 1) is a hole
    assert lost[-1].done and lost[-1].score == 0.0 and not lost[-1].info["won"]
    refused = play(LAKE, ["jump"])
    assert "Unknown action 'jump'" in refused[-1].text and not refused[-1].done  # no step was taken


def test_what_a_rendering_says_by_colour_alone_is_kept():
    """Taxi marks the passenger's stop in blue and the destination in magenta, with no other sign."""
    taxi = {"env": "Taxi-v4", "action_names": ["south", "north", "east", "west", "pickup", "dropoff"],
            "score_range": [-60, 0]}
    obs = play(taxi, ["north"])
    grid = obs[0].text.splitlines()
    assert "R<blue>" in grid[1] and "Y<magenta>" in grid[5] and "[ ]" in grid[1]  # the taxi, highlighted
    assert obs[0].text.count("<") == 2 and "\x1b" not in obs[0].text
    assert not obs[1].done and obs[1].info["return"] == -1.0
    assert plain("\x1b[1mbold\x1b[0m \x1b[30;43mX\x1b[0m \x1b[91mY\x1b[0m") == "bold [X] Y<red>"


def test_an_environment_without_an_ansi_rendering_is_written_out_without_a_warning():
    import warnings

    # gymnasium warns when asked for a render mode an environment lacks, or to render without one; an
    # error here could be swallowed by the adapter's fallback, so the warnings are recorded instead
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        obs = play({"env": "Blackjack-v1", "action_names": ["stick", "hit"], "score_range": [-1, 1]}, ["stick"])
    assert [str(w.message) for w in caught] == []
    assert re.fullmatch(r"\(\d+, \d+, [01]\)", obs[0].text)  # (your sum, the dealer's card, a usable ace)
    assert obs[1].done and obs[1].score in (0.0, 0.5, 1.0)


def test_a_return_is_mapped_onto_scores_by_the_range_given():
    won = play(CLIFF, ["up", *["right"] * 11, "down"])  # the 13-step path along the cliff: return -13
    assert won[-1].done and won[-1].score == 1.0 and won[-1].info["return"] == -13.0
    half = play(CLIFF, ["up", "down"])  # -2 so far, not done
    assert not half[-1].done and half[-1].score == 1.0  # -2 is above the range: clipped
    fell = play(CLIFF, ["right"])  # into the cliff: -100, back to the start
    assert fell[-1].score == 0.0


def test_splits_are_disjoint_seeds_and_a_misspelt_environment_is_named():
    bench = plugins.make("benchmark", "gym", **LAKE)
    seeds = {s: {t.seed for t in bench.tasks(s, 5)} for s in ("train", "dev", "test")}
    assert not (seeds["train"] & seeds["dev"] or seeds["dev"] & seeds["test"] or seeds["train"] & seeds["test"])
    assert "Frozen lake involves crossing" in bench.tasks("dev", 1)[0].prompt
    with pytest.raises(BenchmarkError, match="no Gymnasium environment 'FrozenLake-v9'; did you mean 'FrozenLake"):
        plugins.make("benchmark", "gym", env="FrozenLake-v9")
    with pytest.raises(BenchmarkError, match="action_names has 2 names; FrozenLake-v1 has 4 actions"):
        plugins.make("benchmark", "gym", env="FrozenLake-v1", action_names=["left", "right"])


@pytest.mark.parametrize("options", [LAKE, CLIFF], ids=["FrozenLake", "CliffWalking"])
def test_evolver_eval_and_run_play_it_from_the_configuration_alone(tmp_path, monkeypatch, options):
    import tomli_w
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "gym.toml"  # all a user writes: which environment, its arguments, its actions' names
    config.write_text(tomli_w.dumps({"benchmark": "gym", "benchmark_options": options}))
    args = ["--config", str(config), "--plugin", TOY, "--store", str(tmp_path / "store"), '--set=proposers=["evoskill"]',
            *[f"--set=roles.{r}.backend=toyrule" for r in ("executor", "proposer", "builder", "judge")]]
    r = CliRunner().invoke(cli, args + ["eval", "--split", "dev", "--per-category", "2"], catch_exceptions=False)
    assert r.exit_code == 0 and options["env"] in r.output, r.output
    r = CliRunner().invoke(cli, args + ["run", "--iterations", "1", "--set=loop.dev_per_category=2",
                                        "--set=loop.test_per_category=2", "--set=loop.train_per_category=1"],
                           catch_exceptions=False)
    assert r.exit_code == 0 and "report:" in r.output, r.output
