"""Helpers of the skill miner's tests on the door benchmark: an episode played by given actions, a run
that holds given episodes, and the CLI's arguments for a real run with the tiny model."""
from pathlib import Path
from types import SimpleNamespace

from evolver import Episode, Step


def played(bench, task, actions):
    """An episode of ``actions`` played in ``task``'s environment (what a rollout stores)."""
    env, ep = bench.env(task), Episode(task=task, program_id="p", program_hash="h", model="m", seed=0)
    obs = env.reset()
    for a in actions:
        if obs.done:
            break
        obs = env.step(a)
        ep.steps.append(Step(index=len(ep.steps), prompt="", output=a, action=a, observation=obs.text,
                             reward=obs.score))
    ep.score, ep.won = obs.score, bool(obs.info.get("won"))
    return ep


class FakeStore:
    def __init__(self, episodes):
        self._episodes = episodes

    def episodes(self, **_):
        return list(self._episodes)


def door_run(tmp_path, tiny_dir, monkeypatch, plugin_names: str) -> list[str]:
    """The CLI's arguments before ``run`` for a real run on the door benchmark with the tiny model in
    every role (in ``tmp_path``, with only ``plugin_names`` loaded)."""
    from evolver import plugins
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVOLVER_PLUGINS", plugin_names)
    plugins.reset()
    roles = ("executor", "proposer", "builder", "judge")
    return ["--plugin", str(Path(__file__).with_name("doorbench.py")), "--store", str(tmp_path / "store"),
            "--set=benchmark=doors", "--set=benchmark_options={}",
            *[f"--set=roles.{r}.backend=transformers" for r in roles],
            *[f"--set=roles.{r}.model={tiny_dir}" for r in roles]]


def fake_run(bench, episodes):
    logged = []
    run = SimpleNamespace(id="r", benchmark=bench, store=FakeStore(episodes), log=logged.append, status="",
                          repo=SimpleNamespace(manifest=lambda pid: {"id": pid, "parent": ""}))
    return run, logged
