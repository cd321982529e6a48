"""Extraction from user turns, judge guardrails, and versioned merges as git commits."""
import subprocess

from autoskill_helpers import card
from evolver.backends.scripted import ScriptedBackend
from evolver.types import Episode, Step, Task
from evolver_autoskill.bank import SkillBank, scope_folder
from evolver.embeddings import HashingEmbedder
from evolver_autoskill.extract import Candidate, LLMExtractor, RuleExtractor
from evolver_autoskill.manage import Manager

EMB = HashingEmbedder()


def cand(c, confidence=0.9, evidence=("conversation:c1",)):
    return Candidate(c, confidence, list(evidence))


def git(bank, *args):
    return subprocess.run(["git", *args], cwd=bank.path, capture_output=True, text=True, check=True).stdout


# -- extraction ---------------------------------------------------------------------------------------

def test_extraction_uses_user_turns_only_and_skips_one_off_requests():
    ext = RuleExtractor()
    assert ext.from_user_turns(["Translate 'good morning' into French."], ["conversation:a"]) is None
    got = ext.from_user_turns(["Write an email to my landlord about the heating.",
                               "Always sign my emails with 'Best, Ana'. Never use exclamation marks."],
                              ["conversation:b"])
    assert got is not None and got.evidence == ["conversation:b"]
    assert "Always sign my emails with 'Best, Ana'." in got.card.instructions
    assert "Never use exclamation marks." in got.card.instructions
    assert got.card.problems() == [] and "landlord" in got.card.description


def test_a_correction_repeated_across_turns_is_a_skill_without_a_marker_word():
    got = RuleExtractor().from_user_turns(["Summarise this report in bullet points.",
                                           "Use bullet points, not paragraphs.",
                                           "Again: bullet points, not paragraphs."], ["conversation:c"])
    assert got is not None and "bullet points, not paragraphs" in got.card.instructions


def test_llm_extractor_sees_only_user_turns_and_validates_the_json():
    answer = ('Sure! {"name": "Email Sign Off", "description": "Use when writing e-mails", "instructions": '
              '["Sign with Best, Ana"], "triggers": ["email"], "tags": ["writing"], "confidence": 0.8}')
    backend = ScriptedBackend([answer, '{"skill": null}', "not json at all"])
    ext = LLMExtractor(backend)
    got = ext.from_user_turns(["Always sign with Best, Ana"], ["conversation:d"])
    assert got.card.name == "email-sign-off" and got.card.instructions == "- Sign with Best, Ana"
    assert ext.from_user_turns(["hi"], []) is None and ext.from_user_turns(["hi"], []) is None


def test_episode_extraction_only_from_won_training_episodes():
    task = Task(id="t", benchmark="twx", split="train", category="twc", prompt="Tidy up the room.")
    steps = [Step(0, "", "", "look", "", 0.0), Step(1, "", "", "take shirt", "", 0.5),
             Step(2, "", "", "look", "", 0.5), Step(3, "", "", "put shirt in wardrobe", "", 1.0)]
    ep = Episode(task=task, program_id="p", program_hash="h", model="m", seed=0, steps=steps, score=1.0, id="e1")
    got = RuleExtractor().from_episode(ep)
    assert got.evidence == ["episode:e1"] and "1. take shirt\n2. put shirt in wardrobe" in got.card.instructions
    task.split = "dev"  # distilling dev trajectories would leak the selection split
    assert RuleExtractor().from_episode(ep) is None


# -- judge guardrails ---------------------------------------------------------------------------------

def test_guardrails_never_add_a_duplicate_whatever_the_judge_says(tmp_path):
    bank = SkillBank(tmp_path, "alice")
    bank.add(card("formal-email", "Use when writing formal e-mails to a landlord or an office"), ["conversation:0"])
    judge = ScriptedBackend(rule=lambda req: "add")  # a judge that always wants a new skill
    m = Manager(bank, EMB, judge=judge)
    same_name = m.decide(cand(card("formal-email", "Use when writing letters")))
    assert (same_name.action, same_name.target, same_name.by) == ("merge", "formal-email", "guardrail")
    near = m.decide(cand(card("landlord-mail", "Use when writing formal e-mails to a landlord or an office.")))
    assert (near.action, near.target, near.by) == ("merge", "formal-email", "guardrail")
    assert "near-identical description" in near.reason
    assert judge.calls == []  # guardrails decided before the judge was asked
    low = m.decide(cand(card("x-skill", "Use when doing x"), confidence=0.2))
    assert low.action == "discard"


def test_judge_is_asked_only_between_unrelated_and_duplicate(tmp_path):
    bank = SkillBank(tmp_path, "bob")
    bank.add(card("formal-email", "Use when writing formal e-mails to a landlord", "- Open with Dear."), ["c:0"])
    judge = ScriptedBackend(rule=lambda req: "discard")
    m = Manager(bank, EMB, judge=judge)
    unrelated = m.decide(cand(card("vegetarian-recipes", "Use when asked for vegetarian dinner recipes")))
    assert unrelated.action == "add" and judge.calls == []  # nothing close: no judge call
    related = m.decide(cand(card("email-sign-off", "Use when signing off any message to my landlord",
                                 "- Sign with Best, Ana.")))
    assert related.by == "judge" and related.action == "discard" and len(judge.calls) == 1


# -- versioned merging --------------------------------------------------------------------------------

def test_a_merge_bumps_the_version_and_is_a_commit_naming_its_evidence(tmp_path):
    bank = SkillBank(tmp_path, "carol@example.com")
    assert bank.path.name == scope_folder("carol@example.com") != "carol@example.com"
    m = Manager(bank, EMB)
    first = m.apply(cand(card("formal-email", "Use when writing formal e-mails", "- Open with Dear.",
                              triggers=["email"]), evidence=["conversation:aaa"]))
    assert (first.action, first.version) == ("add", "0.1.0")
    second = m.apply(cand(card("formal-email", "Use when writing formal e-mails", "- Sign with Best, Ana.",
                               triggers=["letter"]), evidence=["conversation:bbb", "conversation:ccc"]))
    assert (second.action, second.version) == ("merge", "0.1.1")
    merged = bank.card("formal-email")
    assert merged.version == "0.1.1" and merged.triggers == ["email", "letter"]
    assert merged.instructions == "- Open with Dear.\n- Sign with Best, Ana."
    hist = bank.history("formal-email")
    assert [h["subject"] for h in hist] == ["add formal-email v0.1.0", "merge formal-email v0.1.0 -> v0.1.1"]
    assert hist[1]["evidence"] == ["conversation:bbb", "conversation:ccc"] and hist[1]["commit"] == second.commit
    assert "evidence: conversation:bbb, conversation:ccc" in git(bank, "log", "-1", "--format=%B")
    assert bank.versions() == {"formal-email": ["0.1.0", "0.1.1"]}
    assert "Sign with Best" not in git(bank, "show", "formal-email/v0.1.0:skills/formal-email/SKILL.md")
    # The same evidence again changes nothing: no empty version.
    again = m.apply(cand(card("formal-email", "Use when writing formal e-mails", "- Sign with Best, Ana.",
                              triggers=["letter"]), evidence=["conversation:ddd"]))
    assert again.action == "discard" and "adds nothing new" in again.reason
    assert bank.card("formal-email").version == "0.1.1" and len(bank.history("formal-email")) == 2


def test_caps_hold_over_many_merges(tmp_path):
    bank = SkillBank(tmp_path, "dave")
    m = Manager(bank, EMB)
    for i in range(30):
        m.apply(cand(card("formal-email", "Use when writing formal e-mails",
                          f"- Rule number {i} about {'x' * 80} variant {i}.", triggers=[f"trigger {i}"])))
    final = bank.card("formal-email")
    assert final.problems() == [] and len(final.triggers) == 8
    assert len(final.instructions) <= 2000
