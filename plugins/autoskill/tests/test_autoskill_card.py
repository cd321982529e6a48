"""The 7-tuple on disk and its hard caps."""
import pytest

from evolver.skills import parse_skill
from evolver_autoskill.card import CAPS, SkillCapError, SkillCard, bump, read_card, write_card


def test_seven_tuple_round_trips_through_an_agent_skills_folder(tmp_path):
    c = SkillCard(name="formal-email", description="Use when writing e-mails to officials.",
                  instructions="- Open with Dear.\n- Sign with the full name.", triggers=["email", "letter"],
                  tags=["writing"], examples=["Write to my landlord"], version="0.1.3")
    folder = write_card(tmp_path, c)
    assert read_card(folder) == c
    skill = parse_skill(folder)  # still a plain Agent Skill for the core
    assert skill.meta["version"] == "0.1.3" and skill.meta["triggers"] == ["email", "letter"]
    assert skill.body.startswith("- Open with Dear.")


@pytest.mark.parametrize("field,value,words", [
    ("triggers", [f"t{i}" for i in range(CAPS.max_triggers + 1)], "triggers (cap"),
    ("tags", [f"g{i}" for i in range(CAPS.max_tags + 1)], "tags (cap"),
    ("examples", ["e"] * (CAPS.max_examples + 1), "examples (cap"),
    ("instructions", "- x\n" * 1000, "instructions are"),
    ("version", "v1", "MAJOR.MINOR.PATCH"),
])
def test_a_card_over_a_cap_is_refused_and_nothing_is_written(tmp_path, field, value, words):
    c = SkillCard(name="big", description="Use when testing caps.", instructions="- ok.")
    setattr(c, field, value)
    with pytest.raises(SkillCapError, match=words.replace("(", r"\(")):
        write_card(tmp_path, c)
    assert not (tmp_path / "big").exists()


def test_clamp_drops_duplicates_before_cutting_and_says_what_it_cut():
    triggers = ["Email", "email ", "letter"] + [f"t{i}" for i in range(20)]
    c = SkillCard(name="x", description="d " * 400, instructions="- rule\n" * 600, triggers=triggers)
    clamped, notes = c.clamp()
    assert clamped.problems() == []
    assert clamped.triggers[:3] == ["Email", "letter", "t0"]  # the case-folded duplicate went first
    assert len(clamped.triggers) == CAPS.max_triggers
    assert clamped.instructions.endswith("- rule")  # cut at a line boundary
    assert any(n.startswith("triggers: kept") for n in notes) and any("description" in n for n in notes)


def test_semantic_version_bump():
    assert bump("0.1.9") == "0.1.10" and bump("0.1.9", "minor") == "0.2.0" and bump("1.4.2", "major") == "2.0.0"
    with pytest.raises(SkillCapError, match="MAJOR.MINOR.PATCH"):
        bump("latest")
