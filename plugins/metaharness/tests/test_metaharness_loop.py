"""Meta-Harness through the core loop, with a scripted proposer model and the deterministic toy benchmark.

The toy benchmark's answer is the word in capitals; the scripted executor writes it in lower case unless
told otherwise, so a harness that normalises the model's output measurably improves the score (0 -> 1).
"""
import re
import sys
from pathlib import Path

import pytest

from evolver import plugins
from evolver.harness import SEED_DIR
from evolver.loop import run_loop
from evolver.programs import ProgramRepo
from evolver.run import Run
from evolver.store import Store

PLUGIN = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parents[3] / "tests"
sys.path[:0] = [str(PLUGIN), str(TESTS)]
import toybench  # noqa: E402
from test_loop import make_config  # noqa: E402



@pytest.fixture(autouse=True)
def only_this_plugin(monkeypatch):
    """Load this plugin from its folder (installed or not) and no other entry-point plugin but EvoSkill."""
    monkeypatch.setenv("EVOLVER_PLUGINS", "evoskill")
    plugins.reset()
    yield
    plugins.reset()


SEED = (SEED_DIR / "harness" / "harness.py").read_text()
PARSE_LINE = '        action = first.removeprefix("Action:").strip()\n'
assert PARSE_LINE in SEED  # the variants below edit this line of the seed harness
UPPERCASE = SEED.replace(PARSE_LINE, PARSE_LINE.replace(".strip()\n", ".strip().upper()\n"))
RAISES_ON_IMPORT = SEED.replace("class Harness:", "raise RuntimeError('broken at import time')\n\n\nclass Harness:")
HANGS = SEED.replace("    def next_call(self, state, obs):\n",
                     "    def next_call(self, state, obs):\n        while True:\n            pass\n")
HARD_CODED = SEED.replace("class Harness:", "ANSWERS = {'apple': 'APPLE', 'river': 'RIVER', 'maple': 'MAPLE'}\n\n\n"
                          "class Harness:")
READS_GOLD = SEED.replace(PARSE_LINE, "        return Action(env_action=str(state['task'].gold), output=text)\n")
CONSTANT_ONLY = SEED.replace("HISTORY_STEPS = 4", "HISTORY_STEPS = 6")


def answer(code: str, hypothesis="answers are lower case in the traces; the scorer wants capitals",
           mechanism="parsing: upper-case the model's action") -> str:
    return f"PARENT: seed\nHYPOTHESIS: {hypothesis}\nMECHANISM: {mechanism}\n```python\n{code}```\n"


def proposer_rule(answers: list[str], prompts: list[str] | None = None):
    """Executor and proposer in one scripted rule; candidate k of an iteration gets ``answers[k]``."""
    base = toybench.make_rule()

    def rule(req):
        text = "\n".join(m.content for m in req.messages)
        if "HYPOTHESIS: <what goes wrong now" in text:
            if prompts is not None:
                prompts.append(text)
            m = re.search(r"You are writing candidate (\d+) of", text)
            return answers[int(m.group(1)) - 1 if m else 0]
        return base(req)
    return rule


def run_toy(tmp_path, rule, proposers=("meta-harness",), plugin_options=None, **loop):
    plugins.load_local(TESTS / "toybench.py")
    plugins.load_local(PLUGIN / "evolver_metaharness")
    cfg = make_config(tmp_path, rule, **{"iterations": 1, **loop})
    cfg.proposers, cfg.plugins = list(proposers), plugin_options or {}
    store = Store(tmp_path / "store" / "evolver.duckdb")
    repo = ProgramRepo(tmp_path / "store")
    run = Run(cfg, store, repo)
    try:
        summary = run_loop(run)
    finally:
        run.close()
    return run, store, repo, summary


def test_a_harness_that_improves_the_benchmark_is_admitted_with_its_lineage_and_diff(tmp_path):
    run, store, repo, summary = run_toy(tmp_path, proposer_rule([answer(UPPERCASE)]))
    try:
        (prop,) = store.proposals(run.id)
        cid = prop["candidate_id"]
        assert prop["status"] == "admitted" and prop["operator"] == "harness" and prop["proposer"] == "meta-harness"
        assert prop["hypothesis"].startswith("answers are lower case")
        assert prop["detail"]["mechanism"] == "parsing: upper-case the model's action"
        assert summary["test"]["seed"]["score"] == 0.0 and summary["test"][cid]["score"] == 1.0
        # its own branch, and a commit whose git parent is the harness it copied
        assert cid in repo.branches("cand/")
        assert repo._git("rev-parse", repo.resolve(cid) + "^") == repo.resolve("seed")
        assert ".upper()" in repo.files(cid)["harness/harness.py"]
        report = Path(summary["report"]).read_text()
        assert f"## Diff of {cid}" in report and "+        action = first.removeprefix(\"Action:\").strip().upper()" in report
        assert "Mechanism: parsing: upper-case the model's action" in report
        assert "| program | score | context_tokens | cost |" in report
        tokens = run.frontier.get(cid).metrics["context_tokens"]
        assert f"| {cid} | 1.000 | {tokens:.3f} |" in report
    finally:
        store.close()


def test_broken_slow_cheating_and_constant_only_harnesses_are_rejected_with_their_reasons(tmp_path, monkeypatch):
    import evolver.lockstep
    monkeypatch.setattr(evolver.lockstep, "HARNESS_CALL_S", 1.0)  # the hanging one costs one second
    answers = [answer(RAISES_ON_IMPORT), answer(HANGS), answer(HARD_CODED), answer(READS_GOLD),
               answer(CONSTANT_ONLY)]
    run, store, repo, summary = run_toy(tmp_path, proposer_rule(answers), candidates_per_iteration=5, patience=1)
    try:
        props = store.proposals(run.id)
        assert [p["status"] for p in props] == ["rejected"] * 5
        raises, hangs, hard, gold, constant = (p["reason"] for p in props)
        assert raises.startswith("harness import failed") and "broken at import time" in raises
        assert hangs.startswith("smoke episode failed") and "longer than 1s" in hangs and "sandboxed" in hangs
        assert hard in {f"leaks a gold answer or task id: '{w}'" for w in ("apple", "river", "maple")}
        assert gold.startswith("harness names particular tasks") and "state['task'].gold" in gold
        assert constant == "meta-harness: the code changes only constants, not a mechanism"
        assert summary["best"] == "seed"
    finally:
        store.close()


def test_a_crash_while_playing_is_rejected_with_the_sandboxed_traceback(tmp_path):
    crashes = SEED.replace("    def next_call(self, state, obs):\n",
                           "    def next_call(self, state, obs):\n        return self.helper(state)\n\n"
                           "    def helper(self, state):\n        raise KeyError('no-such-key')\n\n"
                           "    def unused(self, state, obs):\n")
    run, store, repo, summary = run_toy(tmp_path, proposer_rule([answer(crashes)]))
    try:
        (prop,) = store.proposals(run.id)
        assert prop["status"] == "rejected" and prop["reason"].startswith("smoke episode failed")
        assert "in the sandboxed harness" in prop["reason"]
        assert "Traceback" in prop["reason"] and "in helper" in prop["reason"]  # the child's own frames
        smoke = store.episodes(program_id=prop["candidate_id"], purpose="smoke")
        assert len(smoke) == 1 and "no-such-key" in smoke[0].error
    finally:
        store.close()


def test_the_workspace_holds_the_previous_iterations_candidates_with_their_traces(tmp_path):
    seen = []

    def look(req_text, workspace=tmp_path / "store" / "metaharness"):
        files = sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*") if p.is_file())
        seen.append((req_text, files))

    prompts = []
    rule = proposer_rule([answer(UPPERCASE)], prompts)

    def watching(req):
        text = "\n".join(m.content for m in req.messages)
        if "HYPOTHESIS: <what goes wrong now" in text:
            look(text)
        return rule(req)
    # tau above 1: every episode is a failure, so iteration 1 proposes too
    run, store, repo, summary = run_toy(tmp_path, watching, iterations=2, failure_threshold=1.01, patience=3)
    try:
        assert len(seen) == 2
        cid = store.proposals(run.id)[0]["candidate_id"]
        first_files, second_files = seen[0][1], seen[1][1]
        prefix = f"{run.id}/candidates/{cid}/"
        assert not any(f.startswith(prefix) for f in first_files)
        mine = [f for f in second_files if f.startswith(prefix)]
        assert prefix + "harness/harness.py" in mine and prefix + "diff.patch" in mine
        traces = [f for f in mine if "/traces/" in f and f.endswith(".txt")]
        played = store.episodes(run_id=run.id, program_id=cid)
        assert {e.purpose for e in played} >= {"smoke", "eval"}
        assert len(traces) == len([e for e in played if e.task.split != "test"]) and traces
        trace = (tmp_path / "store" / "metaharness" / traces[0]).read_text()
        assert trace.startswith("episode ") and "--- step 0" in trace and "prompt (tail)" in trace
        ws = tmp_path / "store" / "metaharness" / run.id
        summary_md = (ws / "summary.md").read_text()
        assert f"| {cid} | 0 | meta-harness | seed | parsing: upper-case the model's action |" in summary_md
        assert "admitted" in summary_md and "+1.000" in summary_md  # delta vs the seed's dev score
        scores_md = (ws / "candidates" / cid / "scores.md").read_text()
        assert "| dev | eval | 4 | 1.000 |" in scores_md and "| test |" not in scores_md  # never the test split
        # refreshed once more at the end of the run: the last iteration's outcome is there too
        last = store.proposals(run.id)[-1]
        assert last["iteration"] == 1 and f"| {last['candidate_id']} | 1 |" in summary_md
        assert f"status: {last['status']}" in (ws / "candidates" / last["candidate_id"] / "proposal.md").read_text()
        # single-call mode showed some traces and listed the rest by path
        assert f"candidates/{cid}/traces/" in seen[1][0]
        assert "## Left out to fit the budget" in seen[1][0] or "Nothing was left out." in seen[1][0]
    finally:
        store.close()


def test_meta_harness_and_evoskill_compose_in_one_run(tmp_path):
    rule = proposer_rule([answer(UPPERCASE)])
    run, store, repo, summary = run_toy(tmp_path, rule, proposers=("evoskill", "meta-harness"), iterations=2,
                                        candidates_per_iteration=2, failure_threshold=1.01, patience=3,
                                        objectives=["score:max"])
    try:
        props = store.proposals(run.id)
        first = [p for p in props if p["iteration"] == 0]
        assert sorted(p["proposer"] for p in first) == ["evoskill", "meta-harness"]
        both = []
        for p in props:
            files = repo.files(p["candidate_id"])
            if ".upper()" in files.get("harness/harness.py", "") and any(f.startswith("skills/") and
                                                                          f.endswith("SKILL.md") for f in files):
                both.append(p)
        assert both, "a program holding an evolved harness and an evolved skill"
    finally:
        store.close()
