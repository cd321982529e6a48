"""twx's seed is honest: it carries no hand-written skill. The four solvers written by hand for twx are
the opt-in pack ``twx-experts`` (``--set seed_skills=twx-experts``), marked ``metadata.hand_written``."""
from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from evolver import SkillError
from evolver.skill_quality import content_problems
from evolver.skills import hand_written, parse_skill
from evolver.config import load_config
from evolver.seeding import seed_files
from evolver_twx.benchmark import PACKS, TwxBenchmark

PACK = ["arithmetic-word-problems", "quantity-order", "recipe-steps", "usual-place"]


def seed_skills(names) -> dict[str, str]:
    files = seed_files(skills=names, packs=TwxBenchmark.skill_packs)
    try:
        return {p.parent.name: p.read_text() for p in (files / "skills").glob("*/SKILL.md")}
    finally:
        shutil.rmtree(files)


def test_the_default_seed_carries_no_hand_written_skill():
    assert TwxBenchmark.seed_skills == []
    assert not any(hand_written(text) for text in seed_skills(TwxBenchmark.seed_skills).values())


def test_seed_skills_twx_experts_gives_the_four_marked_hand_written():
    names = load_config(None, ["benchmark=twx", "seed_skills=twx-experts"]).seed_skills
    skills = seed_skills(names)
    assert sorted(skills) == PACK
    for name, text in skills.items():
        assert hand_written(text), name
        assert "Hand-written for twx" in text and "not learned" in text, name
    assert sorted(seed_skills(["usual-place"])) == ["usual-place"]  # one skill of the pack alone
    assert (PACKS / "twx-experts" / "usual-place" / "places.npy").is_file()


def test_an_unknown_pack_or_skill_name_says_what_is_known():
    with pytest.raises(SkillError) as err:
        seed_skills(["twx-expert"])
    assert "'twx-expert'" in str(err.value) and f"pack twx-experts: {', '.join(PACK)}" in str(err.value)


def test_the_pack_skills_pass_the_skill_checks_and_travel_in_the_wheel():
    for name in PACK:
        skill = parse_skill(PACKS / "twx-experts" / name)
        assert content_problems(skill.name, skill.description, skill.body) == [], name
    tool = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "packs/**/*" in tool["package-data"]["evolver_twx"]
