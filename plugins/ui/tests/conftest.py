"""Every evolver-ui test runs with the plugin loaded, as an installed one is (the suite's EVOLVER_PLUGINS
leaves it out), on one finished run of the toy benchmark built once per module."""
from pathlib import Path

import pytest

from evolver import ProgramRepo, Run, Store, plugins
from evolver.config import Config

TOY = Path(__file__).resolve().parents[3] / "tests" / "toybench.py"

# A proposer for the toy benchmark: iteration 0 adds the skill that solves it (admitted); later ones swap it
# for a useless one (stopped after the probe) and add a skill without front matter (rejected).
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
        # The useless skill is the longer one: worse and no leaner, it cannot be admitted even as a trade-off.
        body = ("Keep every answer short and plain: one word, no punctuation, no explanation, nothing around it, "
                "and nothing before it.") if had else "Answer with the word in UPPERCASE letters."
        Skills.write(skills, "brief" if had else "shout-words", "Use when asked to answer with a word.", body)
        if not had:
            return [d]
        bad = ctx.new_draft("create", "a SKILL.md without front matter")
        (Path(bad.path) / "skills" / "oops").mkdir()
        (Path(bad.path) / "skills" / "oops" / "SKILL.md").write_text("just text, no front matter")
        return [d, bad]

@hookimpl
def register_proposers(register):
    register("toggler", Toggler)
'''


def load_ui():
    """Register evolver_ui by hand, as its entry point would."""
    import evolver_ui

    if plugins.manager().get_plugin("ui") is None:
        plugins.manager().register(evolver_ui, name="ui")


@pytest.fixture(autouse=True)
def ui_loaded():
    load_ui()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """(store folder, run id) of a finished two-iteration run with the ui plugin loaded: p0001 admitted,
    p0002 stopped after the probe, p0003 rejected."""
    from evolver.config import RoleConfig
    from evolver.loop import run_loop

    tmp = tmp_path_factory.mktemp("ui-run")
    (tmp / "toggler.py").write_text(TOGGLER)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVOLVER_HOME", str(tmp / "home"))
        plugins.reset()
        plugins.load_local(TOY)
        plugins.load_local(tmp / "toggler.py")
        load_ui()
        import toybench

        roles = {r: RoleConfig(backend="scripted", options={"rule": toybench.make_rule()})
                 for r in ("executor", "proposer", "builder", "judge")}
        cfg = Config(benchmark="upper", benchmark_options={}, store=str(tmp / "store"), roles=roles,
                     proposers=["toggler"],
                     loop={"iterations": 2, "train_per_category": 2, "dev_per_category": 2, "test_per_category": 2,
                           "candidates_per_iteration": 2, "failure_threshold": 1.01, "patience": 5})
        store = Store(Path(cfg.store) / "evolver.duckdb")
        run = Run(cfg, store, ProgramRepo(Path(cfg.store)))
        try:
            run_loop(run)
        finally:
            run.close()
            store.close()
            plugins.reset()
    return tmp / "store", run.id
