"""The live display's scoreboard: the seed's dev score and each candidate's as it is admitted or discarded."""
import io
from types import SimpleNamespace

from rich.console import Console

from evolver import plugins
from evolver.frontier import Frontier
from evolver.types import Candidate, Proposal
from evolver.live_status import LiveStatus


def fake_run():
    frontier = Frontier.from_config(["score:max"], 3)
    frontier.consider("seed", {"score": 0.25}, -1)
    return SimpleNamespace(id="20250101-000000-abcd", iteration=0, status="iteration 0: evaluating",
                           config=SimpleNamespace(loop=SimpleNamespace(iterations=3)), frontier=frontier,
                           tokens={}, elapsed=lambda: 12.0, ui=None)


def candidate(cid, operator, score=None):
    cand = Candidate(cid, Proposal("evoskill", operator, "seed", "", {}, cid), f"cand/{cid}")
    if score is not None:
        cand.scores = {"score": score, "context_tokens": 100.0}
    return cand


def text(ui, run) -> str:
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(ui.render(run))
    return console.file.getvalue()


def test_admitted_and_discarded_candidates_appear_with_their_dev_scores():
    run = fake_run()
    ui = LiveStatus(console=Console(file=io.StringIO()), enabled=False)
    run.ui = ui
    hook = plugins.hook()  # the built-in on_candidate hook forwards to run.ui
    hook.on_candidate(run=run, candidate=candidate("p0001", "create"), outcome="proposed")
    assert "p0001" not in text(ui, run) and "0.250" in text(ui, run)  # the seed's score, before any candidate
    hook.on_candidate(run=run, candidate=candidate("p0001", "create", 0.75), outcome="admitted")
    hook.on_candidate(run=run, candidate=candidate("p0002", "edit", 0.125), outcome="discarded")
    hook.on_candidate(run=run, candidate=candidate("p0003", "merge"), outcome="discarded")  # stopped at the probe
    shown = text(ui, run)
    rows = [line.split() for line in shown.splitlines()]
    assert ["dev", "scores", "seed", "seed", "0.250", "baseline"] in rows
    assert ["p0001", "create", "0.750", "admitted"] in rows
    assert ["p0002", "edit", "0.125", "discarded"] in rows
    assert ["p0003", "merge", "probe", "discarded"] in rows


def test_the_seed_score_stays_after_the_seed_leaves_the_frontier_and_old_rows_fold():
    run = fake_run()
    ui = LiveStatus(console=Console(file=io.StringIO()), enabled=False)
    ui.update(run)
    run.frontier.consider("p0001", {"score": 0.9}, 0)
    assert "seed" not in run.frontier.ids()
    for i in range(12):
        ui.on_candidate(run, candidate(f"p{i:04d}", "create", i / 12), "discarded")
    shown = text(ui, run)
    assert "0.250" in shown and "4 earlier" in shown and "p0011" in shown and "p0003 " not in shown


def test_the_live_display_redraws_when_a_candidate_is_admitted():
    run = fake_run()
    out = io.StringIO()
    with LiveStatus(console=Console(file=out, force_terminal=True, width=120, color_system=None)) as ui:
        run.ui = ui
        ui.update(run)
        plugins.hook().on_candidate(run=run, candidate=candidate("p0001", "create", 0.75), outcome="admitted")
    assert "p0001  create  0.750  admitted" in out.getvalue()
