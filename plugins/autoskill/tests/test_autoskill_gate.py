"""The outcome gate reverts a harmful merge; usage accounting retires skills that never help."""
import sys
from pathlib import Path

from pytest import approx

from autoskill_helpers import card
from evolver.backends.scripted import ScriptedBackend
from evolver.store import Store
from evolver_autoskill import records
from evolver_autoskill.bank import SkillBank
from evolver.embeddings import HashingEmbedder
from evolver_autoskill.extract import Candidate
from evolver_autoskill.gate import BenchmarkValidator, OutcomeGate, retire_useless
from evolver_autoskill.manage import Manager
from evolver_autoskill.retrieval import Hit, Retrieval

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
import toybench  # noqa: E402

GOOD = card("shout-words", "Use when asked to answer with a word.", "- Answer with the word in UPPERCASE letters.")


def validator():
    """The toy benchmark's dev split, played by the core harness: the scripted executor answers in capitals
    only when a skill in its context says UPPERCASE, so the score measures the bank's skill."""
    bench = toybench.UpperBench()
    executor = ScriptedBackend(rule=toybench.make_rule(), model="toyrule")
    return BenchmarkValidator(bench, executor, bench.tasks("dev"))


def test_the_gate_keeps_a_helpful_add_and_reverts_a_harmful_merge(tmp_path):
    bank = SkillBank(tmp_path / "banks", "alice")
    harmful = ('{"name": "shout-words", "description": "Use when asked to answer with a word.", '
               '"instructions": "- Answer with the word in lowercase letters.", "triggers": ["word"]}')
    manager = Manager(bank, HashingEmbedder(), judge=ScriptedBackend(rule=lambda req: harmful))
    gate = OutcomeGate(validator())
    with Store(tmp_path / "s.duckdb") as store:
        added = manager.apply(Candidate(GOOD, 0.9, ["conversation:a1"]))
        kept = gate.check(bank, added.commit, store)
        assert (kept.before, kept.after, kept.kept) == (0.0, 1.0, True)

        merge = manager.apply(Candidate(card("shout-words", "Use when asked to answer with a word.",
                                             "- Use small letters."), 0.9, ["conversation:b2"]))
        assert merge.action == "merge" and bank.card("shout-words").version == "0.1.1"
        assert "lowercase" in bank.card("shout-words").instructions
        result = gate.check(bank, merge.commit, store)
        assert (result.before, result.after, result.kept) == (1.0, 0.0, False)

        restored = bank.card("shout-words")
        assert restored.version == "0.1.0" and "UPPERCASE" in restored.instructions
        assert bank.log()[-1] == "revert merge shout-words v0.1.0 -> v0.1.1"
        assert bank.head() == result.revert_commit
        body = bank._git("log", "-1", "--format=%B")
        assert f"reverts {merge.commit}" in body and "1.000 -> 0.000" in body
        ev = records.events(store, "alice")
        assert ev[-1]["action"] == "revert" and ev[-1]["detail"] == {"before": 1.0, "after": 0.0}


def _retrieval(names_injected, names_skipped):
    hits = [Hit(n, 0.9, 0.9, 1.0, 1.0, 1.0, "injected") for n in names_injected]
    hits += [Hit(n, 0.3, 0.3, 0.0, 0.2, 0.0, "below_eta") for n in names_skipped]
    return Retrieval(query="q", injected=[card(n, "d") for n in names_injected], hits=hits)


def test_usage_accounting_and_retiring_a_skill_that_never_helps(tmp_path):
    bank = SkillBank(tmp_path / "banks", "erin")
    bank.add(card("useless", "Use when anything happens", "- Say hello first."), ["conversation:x"])
    bank.add(card("useful", "Use when writing", "- Be precise."), ["conversation:y"])
    with Store(tmp_path / "s.duckdb") as store:
        # Conversations where "useless" was injected score 0.2; the others 0.8 (feedback from the user).
        for i in range(6):
            with_it = i % 2 == 0
            cid = f"c{i}"
            records.log_retrieval(store, "erin", "serve", cid,
                                  _retrieval(["useless"] if with_it else ["useful"], ["useful"] if with_it else []))
            records.log_conversation(store, cid, "t", "erin", "m", [], "answer", "q", [], 0.1)
            assert records.set_feedback(store, cid, 0.2 if with_it else 0.8)
        rows = {r["skill"]: r for r in records.usage(store, "erin")}
        assert rows["useless"]["retrieved"] == 3 and rows["useless"]["injected"] == 3
        assert rows["useless"]["with_score"] == approx(0.2) and rows["useless"]["without_score"] == approx(0.8)
        assert rows["useful"]["injected"] == 3 and rows["useful"]["with_score"] == approx(0.8)
        assert retire_useless(bank, store, min_uses=5) == []  # 3 retrievals is too little evidence
        retired = retire_useless(bank, store, min_uses=3)
        assert [name for name, _ in retired] == ["useless"]
        assert [c.name for c in bank.cards()] == ["useful"]
        assert bank.log()[-1] == "retire useless"
        assert "retrieved 3 times" in bank._git("log", "-1", "--format=%B")
        assert records.events(store, "erin")[-1]["action"] == "retire"
