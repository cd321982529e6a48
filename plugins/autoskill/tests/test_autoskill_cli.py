"""`evolver autoskill ...`: skills from a run's training episodes in the store, then inspected."""
from click.testing import CliRunner

from autoskill_helpers import load_plugin
from evolver import plugins
from evolver.store import Store
from evolver.types import Episode, Step, Task


def won(split: str, i: int, actions: list[str]) -> Episode:
    task = Task(id=f"twc/{split}/{i}", benchmark="twx", split=split, category="twc", prompt="Tidy up the room.")
    steps = [Step(j, "", "", a, "", (j + 1) / len(actions)) for j, a in enumerate(actions)]
    return Episode(task=task, program_id="seed", program_hash="h", model="m", seed=i, steps=steps, score=1.0,
                   won=True, run_id="r1", id=f"{split}{i}")


def test_learn_from_training_episodes_then_show_and_history(tmp_path):
    from evolver.cli import cli

    load_plugin()
    plugins.hook().register_commands(cli=cli)
    ws = tmp_path / "ws"
    with Store(ws / "evolver.duckdb") as store:
        store.add_episodes([won("train", 0, ["take shirt", "put shirt in wardrobe"]),
                            won("train", 1, ["take shirt", "put shirt in wardrobe", "take sock", "put sock in drawer"]),
                            won("dev", 2, ["take hat", "put hat on shelf"])])
    runner = CliRunner()
    hashing = 'plugins.autoskill.embedder="hashing"'  # no model load in the fast suite
    res = runner.invoke(cli, ["--store", str(ws), "--set", hashing, "autoskill", "learn", "--run", "r1"],
                        env={"EVOLVER_PLUGINS": "evoskill"}, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "2 training episodes" in res.output and "'add': 1" in res.output and "'merge': 1" in res.output
    res = runner.invoke(cli, ["--store", str(ws), "autoskill", "show", "--scope", "run-r1"], catch_exceptions=False)
    assert "twc-procedure  v0.1.1" in res.output and "1 skills" in res.output
    res = runner.invoke(cli, ["--store", str(ws), "autoskill", "history", "twc-procedure", "--scope", "run-r1"])
    lines = res.output.strip().splitlines()
    assert "add twc-procedure v0.1.0" in lines[0] and "evidence: episode:train0" in lines[0]
    assert "merge twc-procedure v0.1.0 -> v0.1.1" in lines[1] and "episode:train1" in lines[1]
    assert "hat" not in res.output
    res = runner.invoke(cli, ["--store", str(ws), "autoskill", "show", "--scope", "nobody"])
    assert res.exit_code == 2 and "no skill bank for scope 'nobody'" in res.output


def test_a_misspelled_option_is_a_clear_error():
    import pytest

    from evolver.config import Config
    from evolver.errors import ConfigError
    from evolver_autoskill.options import load_options

    with pytest.raises(ConfigError, match=r"\[plugins.autoskill\]: plugins.autoskill.lamda: Extra inputs.*Known keys: .*lam"):
        load_options(Config(plugins={"autoskill": {"lamda": 0.5}}))
    assert load_options(Config(plugins={"autoskill": {"top_k": 5}})).top_k == 5
