"""`evolver train` takes from the trainers what it accepts and shows: their flags, their progress columns,
and the default (the config's, else the first registered trainer without a flag of its own)."""
from pathlib import Path

from click.testing import CliRunner

from evolver.cli import cli

TOY = str(Path(__file__).with_name("toybench.py"))
ROLES = [f"--set=roles.{r}.backend=toyrule" for r in ("executor", "proposer", "builder", "judge")]
TRAINERS = '''
from evolver import Trainer, hookimpl


class Plain(Trainer):
    columns = ("loss {loss:.2f}", "{step_s:.1f}s")
    total_steps = 1

    def __init__(self, run, options, progress=None):
        self.progress = progress

    def train(self, resume=False):
        self.progress({"step": 1, "loss": 0.5, "step_s": 2.0})
        return {"program": None, "evals": [], "history": [], "trainer": type(self).__name__}


class Variant(Plain):
    flag = True
    columns = ()  # every numeric metric
    total_steps = None  # not known: a count without a total


@hookimpl
def register_trainers(register):
    register("plain", Plain, description="a plain trainer")
    register("variant", Variant, description="a variant one asks for by its flag")
'''


def train(tmp_path, *args):
    plugin = tmp_path / "trainers.py"
    plugin.write_text(TRAINERS)
    return CliRunner().invoke(cli, ["--plugin", TOY, "--plugin", str(plugin), "--store", str(tmp_path / "store"),
                                    "--set=benchmark=upper", "--set=benchmark_options={}", *ROLES, "train", *args])


def test_flags_columns_and_the_default_come_from_the_trainers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = train(tmp_path, "--help")
    assert "--variant" in r.output and "a variant one asks for" in r.output and "--plain" not in r.output
    r = train(tmp_path)  # the first registered trainer without a flag of its own
    assert r.exit_code == 0, r.output
    assert "plain: 1/1 steps  [0:00]  loss 0.50  2.0s" in r.output
    r = train(tmp_path, "--variant")
    assert r.exit_code == 0, r.output
    assert "variant: 1 step  [0:00]  loss 0.5  step_s 2" in r.output
    r = train(tmp_path, "--set=trainer=variant")
    assert r.exit_code == 0 and "loss 0.5  step_s 2" in r.output, r.output
    r = train(tmp_path, "--trainer", "plain", "--variant")
    assert r.exit_code != 0 and "--variant and --trainer plain name two trainers" in r.output
