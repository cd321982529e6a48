"""Helpers of the evolver-tracking tests: the plugin registered by hand, a toy loop run with
``[plugins.tracking]`` options, and a stand-in run for calling the hooks directly."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from evolver import ProgramRepo, Run, Store, plugins
from evolver.config import Config

TOY = Path(__file__).resolve().parents[3] / "tests" / "toybench.py"

# A proposer for the toy benchmark that also trains: iteration 0 adds the skill that solves it (admitted)
# and a skill without front matter (rejected), and records two steps of a training run of its own, as a
# trainer proposer does; iteration 1 swaps the skill for a useless one (not admitted).
TOGGLER = '''
import shutil
from pathlib import Path
from evolver import Skills, hookimpl

class Toggler:
    def __init__(self, run, **_):
        pass

    def propose(self, ctx):
        d = ctx.new_draft("create", "toggle the shouting skill")
        skills = Path(d.path) / "skills"
        had = (skills / "shout-words").exists()
        shutil.rmtree(skills / "shout-words", ignore_errors=True)
        body = "Keep every answer short and plain." if had else "Answer with the word in UPPERCASE letters."
        Skills.write(skills, "brief" if had else "shout-words", "Use when asked to answer with a word.", body)
        if had:
            return [d]
        train = ctx.run.training_run(ctx.parent, f"{ctx.run.id}-toy-it{ctx.iteration}")
        train.add_train_steps([{"step": 1, "loss": 2.0, "rewards": {"win": 0.25}},
                               {"step": 2, "loss": 1.0, "rewards": {"win": 0.75}}])
        bad = ctx.new_draft("create", "a SKILL.md without front matter")
        (Path(bad.path) / "skills" / "oops").mkdir()
        (Path(bad.path) / "skills" / "oops" / "SKILL.md").write_text("just text, no front matter")
        return [d, bad]

@hookimpl
def register_proposers(register):
    register("toggler", Toggler)
'''


def load_tracking():
    """Register evolver_tracking by hand, as its entry point would."""
    import evolver_tracking

    if plugins.manager().get_plugin("tracking") is None:
        plugins.manager().register(evolver_tracking, name="tracking")


def toy_run(tmp: Path, tracking: dict) -> tuple[Path, str]:
    """Run two iterations of the toy loop with ``[plugins.tracking]`` = ``tracking``; returns (store, run id)."""
    from evolver.config import RoleConfig
    from evolver.loop import run_loop

    (tmp / "toggler.py").write_text(TOGGLER)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVOLVER_HOME", str(tmp / "home"))
        plugins.reset()
        plugins.load_local(TOY)
        plugins.load_local(tmp / "toggler.py")
        load_tracking()
        import toybench

        roles = {r: RoleConfig(backend="scripted", options={"rule": toybench.make_rule()})
                 for r in ("executor", "proposer", "builder", "judge")}
        cfg = Config(benchmark="upper", benchmark_options={}, store=str(tmp / "store"), roles=roles,
                     proposers=["toggler"], plugins={"tracking": tracking},
                     loop={"iterations": 2, "train_per_category": 2, "dev_per_category": 2, "test_per_category": 2,
                           "best_of_n": True, "candidates_per_iteration": 2, "failure_threshold": 1.01, "patience": 5})
        store = Store(Path(cfg.store) / "evolver.duckdb")
        run = Run(cfg, store, ProgramRepo(Path(cfg.store)))
        try:
            run_loop(run)
        finally:
            run.close()
            store.close()
            plugins.reset()
    return tmp / "store", run.id


def fake_run(tmp: Path, run_id: str = "r1", **tracking):
    """What the hooks read of a run, without a loop: id, config, workspace, frontier, log."""
    best = SimpleNamespace(metrics={"score": 0.5, "context_tokens": 120.0})
    frontier = SimpleNamespace(members=[best], best=lambda: best)
    return SimpleNamespace(id=run_id, config=Config(store=str(tmp), plugins={"tracking": tracking}),
                           workspace=tmp, resumed=False, frontier=frontier, log=print)
