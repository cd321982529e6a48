"""The event hooks the loop and the trainers call beyond a candidate's: ``on_iteration_end`` once per stored
iteration, ``on_train_step`` once per step a trainer records with ``Run.add_train_steps``."""
from pathlib import Path

from evolver import hookimpl, plugins
from evolver.config import Config, RoleConfig
from evolver.loop import run_loop
from evolver.programs import ProgramRepo
from evolver.run import Run
from evolver.store import Store

TOY = Path(__file__).with_name("toybench.py")


class Recorder:
    def __init__(self):
        self.calls = []

    @hookimpl
    def on_iteration_end(self, run, iteration, summary):
        stored = {r["iteration"]: r["status"] for r in run.store.iterations(run.id)}
        self.calls.append(("iteration", iteration, stored[iteration], sorted(summary)))

    @hookimpl
    def on_train_step(self, run, step, metrics):
        self.calls.append(("step", run.id, step, metrics))


def test_each_iteration_and_each_recorded_train_step_reach_the_hooks(tmp_path):
    import toybench

    plugins.load_local(TOY)
    recorder = Recorder()
    plugins.manager().register(recorder, name="recorder")
    roles = {r: RoleConfig(backend="scripted", options={"rule": toybench.make_rule()})
             for r in ("executor", "proposer", "builder", "judge")}
    cfg = Config(benchmark="upper", benchmark_options={}, store=str(tmp_path / "store"), roles=roles,
                 proposers=["evoskill"], loop={"iterations": 2, "train_per_category": 2, "dev_per_category": 2,
                                               "test_per_category": 2, "candidates_per_iteration": 1})
    store = Store(Path(cfg.store) / "evolver.duckdb")
    run = Run(cfg, store, ProgramRepo(Path(cfg.store)))
    try:
        run_loop(run)
        iterations = [c for c in recorder.calls if c[0] == "iteration"]
        # the second iteration has no failures and stops early: it is reported all the same, with its note
        assert [c[1:3] for c in iterations] == [(0, "finished"), (1, "finished")]
        assert {"parent", "train_score", "admitted", "candidates", "frontier"} <= set(iterations[0][3])
        assert "note" in iterations[1][3]
        train = run.training_run(run.repo.checkout("seed"), f"{run.id}-toy-it0")
        train.add_train_steps([{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25, "rewards": {"win": 1.0}}])
        assert [c for c in recorder.calls if c[0] == "step"] == [
            ("step", train.id, 1, {"loss": 0.5}), ("step", train.id, 2, {"loss": 0.25, "rewards": {"win": 1.0}})]
        _, rows = store.query(f"SELECT step FROM train_steps WHERE run_id = '{train.id}' ORDER BY step")
        assert [r[0] for r in rows] == [1, 2]
    finally:
        run.close()
        store.close()
