from pathlib import Path

import pytest

from evolver.errors import SkillError
from evolver.skills import (Skill, SkillCaps, check_skills, load_skills, parse_skill, relevant, render_index,
                            validate_skill, write_skill)

GOOD = """---
name: {name}
description: Use when the recipe needs a tool you do not hold yet.
version: 3
tags: [cooking, tools]
---

# Find the tool first

1. Look in the kitchen.
"""


def make(tmp_path: Path, name: str, text: str | bytes | None) -> Path:
    folder = tmp_path / "skills" / name
    folder.mkdir(parents=True)
    if isinstance(text, bytes):
        (folder / "SKILL.md").write_bytes(text)
    elif text is not None:
        (folder / "SKILL.md").write_text(text)
    return folder


def test_parse_good_skill(tmp_path):
    folder = make(tmp_path, "find-tool", GOOD.format(name="find-tool"))
    (folder / "scripts").mkdir()
    (folder / "scripts" / "where.py").write_text("print('kitchen')\n")
    (folder / "references").mkdir()
    (folder / "references" / "map.md").write_text("rooms\n")
    s = parse_skill(folder)
    assert s.name == "find-tool"
    assert s.description.startswith("Use when the recipe")
    assert s.meta == {"version": 3, "tags": ["cooking", "tools"]}
    assert s.body.startswith("# Find the tool first") and s.body.endswith("kitchen.")
    assert s.scripts == ["scripts/where.py"] and s.references == ["references/map.md"]
    assert s.render_summary() == "- find-tool: Use when the recipe needs a tool you do not hold yet."
    full = s.render_full()
    assert "find-tool" in full and "Look in the kitchen" in full and "scripts/where.py" in full
    assert s.size_chars == len(full)


MALFORMED = [
    # (folder name, SKILL.md text, expected line, words the message must contain)
    ("no-front", "# just markdown\n", 1, "no front matter"),
    ("unterminated", "---\nname: unterminated\ndescription: x\n", 1, "closing `---`"),
    ("bad-yaml", "---\nname: bad-yaml\ndescription: a: b\n---\nbody\n", 3, "invalid YAML"),
    ("bad-yaml-later", "---\nname: bad-yaml-later\ndescription: ok\ntags: [a, b\n---\n", 4, "invalid YAML"),
    ("not-mapping", "---\n- a\n- b\n---\nbody\n", 2, "mapping"),
    ("no-name", "---\ndescription: when x\n---\nbody\n", 1, "add `name:"),
    ("no-desc", "---\nname: no-desc\n---\nbody\n", 1, "add `description: <when to use this skill>`"),
    ("empty-desc", "---\nname: empty-desc\ndescription: ''\n---\nbody\n", 3, "description"),
    ("mismatch", "---\nname: other-name\ndescription: when x\n---\nbody\n", 2, "differs from the folder"),
    ("Bad_Name", "---\nname: Bad_Name\ndescription: when x\n---\nbody\n", 2, "lowercase"),
    ("dash--twice", "---\nname: dash--twice\ndescription: when x\n---\n", 2, "single hyphens"),
    ("a" * 65, "---\nname: " + "a" * 65 + "\ndescription: when x\n---\n", 2, "at most 64"),
    ("number-name", "---\nname: 12\ndescription: when x\n---\n", 2, "must be text"),
]


@pytest.mark.parametrize("name,text,line,words", MALFORMED, ids=[m[0][:20] for m in MALFORMED])
def test_malformed_skill_names_file_and_line(tmp_path, name, text, line, words):
    folder = make(tmp_path, name, text)
    with pytest.raises(SkillError) as info:
        parse_skill(folder)
    err = info.value
    assert err.path == str(folder / "SKILL.md")
    assert err.line == line, err
    assert words in err.message
    assert f"{folder / 'SKILL.md'}:{line}:" in str(err)


def test_missing_skill_md_and_non_utf8(tmp_path):
    folder = make(tmp_path, "empty", None)
    with pytest.raises(SkillError, match="missing SKILL.md") as info:
        parse_skill(folder)
    assert info.value.path == str(folder)
    with pytest.raises(SkillError, match="UTF-8"):
        parse_skill(make(tmp_path, "latin", b"---\nname: latin\ndescription: caf\xe9\n---\n"))


def test_caps(tmp_path):
    caps = SkillCaps(max_description_chars=20, max_body_chars=30, max_files=2, max_total_bytes=500)
    folder = write_skill(tmp_path, "big", "x" * 21, "y" * 31, scripts={"a.py": "1", "b.rb": "puts 1" + " " * 600})
    problems = validate_skill(parse_skill(folder), caps)
    text = "\n".join(problems)
    assert "description is 21 chars" in text and "body is 31 chars" in text
    assert "3 files; the cap is 2" in text and "bytes in all" in text
    assert "scripts/b.rb: no known interpreter" in text
    ok = write_skill(tmp_path, "small", "when small", "short", scripts={"run.sh": "echo hi\n", "x": "#!/bin/sh\n"})
    assert validate_skill(parse_skill(ok)) == []


def test_load_strict_and_lenient(tmp_path):
    skills_dir = tmp_path / "skills"
    write_skill(skills_dir, "zeta", "when zeta", "z")
    write_skill(skills_dir, "alpha", "when alpha", "a")
    make(tmp_path, "broken", "no front matter\n")
    write_skill(skills_dir, "too-long", "when long", "w" * 7000)
    (skills_dir / "__pycache__").mkdir()
    assert [s.name for s in load_skills(skills_dir, strict=False)] == ["alpha", "zeta"]
    errors = check_skills(skills_dir)
    assert [Path(e.path).parent.name for e in errors] == ["broken", "too-long"]
    with pytest.raises(SkillError, match="no front matter"):
        load_skills(skills_dir)
    assert load_skills(tmp_path / "absent") == []
    capped = check_skills(skills_dir, SkillCaps(max_skills=1))
    assert any("the cap is 1" in e.message for e in capped)
    assert [s.name for s in load_skills(skills_dir, SkillCaps(max_skills=1), strict=False)] == ["alpha"]


def test_write_parse_round_trip(tmp_path):
    meta = {"version": "0.2", "triggers": ["stuck", "no: colon"], "examples": [{"in": "a", "out": "b"}],
            "category": "twx"}
    folder = write_skill(tmp_path, "round-trip", "Use when: the door is locked.\nSecond line.",
                         "\n\n# Title\n\n    indented code\n\ntext  \n\n", meta=meta,
                         scripts={"solve.py": "print(1)\n"}, references={"notes/a.md": "ref\n"})
    s = parse_skill(folder)
    assert (s.name, s.description, s.meta) == ("round-trip", "Use when: the door is locked.\nSecond line.", meta)
    assert s.body == "# Title\n\n    indented code\n\ntext"
    assert s.scripts == ["scripts/solve.py"] and s.references == ["references/notes/a.md"]
    assert (folder / "scripts" / "solve.py").stat().st_mode & 0o111
    again = write_skill(tmp_path, s.name, s.description, s.body, meta=s.meta)
    assert parse_skill(again) == s  # writing what was read changes nothing


@pytest.mark.parametrize("kwargs,words", [
    ({"name": "Bad Name"}, "bad name"), ({"description": "  "}, "empty description"),
    ({"scripts": {"../escape.py": "x"}}, "bad file name"), ({"references": {"/abs.md": "x"}}, "bad file name"),
])
def test_write_skill_rejects(tmp_path, kwargs, words):
    args = {"name": "ok", "description": "when ok", "body": "b", **kwargs}
    with pytest.raises(SkillError, match=words):
        write_skill(tmp_path, **args)


def _skill(name, description, body=""):
    return Skill(name=name, description=description, body=body, path=Path(name))


def test_relevant_ranking():
    skills = [
        _skill("cook-meal", "Use when a recipe must be cooked: slice, fry, roast ingredients.", "Read the cookbook."),
        _skill("sort-items", "Use when objects must be put in order by size or weight.", "Compare then place."),
        _skill("arithmetic", "Use when a number must be computed.", "Add the numbers; recipes never matter."),
    ]
    assert [s.name for s in relevant(skills, "You need to fry and slice the ingredients of the recipe", 3)] \
        == ["cook-meal", "arithmetic"]
    assert [s.name for s in relevant(skills, "put the items in order of weight", 1)] == ["sort-items"]
    assert relevant(skills, "the of and", 3) == [] and relevant(skills, "zebra", 3) == []
    assert relevant(skills, "numbers", 0) == []
    twins = [_skill("b-twin", "when apples"), _skill("a-twin", "when apples")]
    assert [s.name for s in relevant(twins, "apples", 2)] == ["a-twin", "b-twin"]  # ties by name


def test_render_index():
    skills = [_skill("one", "when one\n  happens"), _skill("two", "when two")]
    block = render_index(skills)
    assert "read_skill <name>" in block
    assert "- one: when one happens\n- two: when two\n" in block
    assert render_index([]) == ""


def test_shipped_skills_are_found_and_travel_in_the_wheel():
    """In a checkout the API finds the top-level skills/; pyproject maps that folder into the package
    (evolver/_shipped_skills) with an explicit package list, which must name every package under evolver/."""
    import tomllib

    from setuptools import find_packages

    from evolver.skills import shipped_skill, shipped_skills_dir

    root = Path(__file__).resolve().parents[1]
    assert shipped_skills_dir() == root / "skills"
    assert (shipped_skill("writing-skills") / "SKILL.md").is_file()
    tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["package-dir"]["evolver._shipped_skills"] == "skills"
    assert set(find_packages(root, include=["evolver*"])) | {"evolver._shipped_skills"} == set(tool["packages"])
    assert tool["package-data"]["evolver._shipped_skills"] == ["**/*"]


def test_a_symlink_out_of_a_skill_is_rejected_and_one_inside_is_fine(tmp_path):
    from evolver.skills import check_skills, write_skill

    folder = write_skill(tmp_path / "skills", "peek", "Use when reading notes.", "1. Read references/notes.md.",
                         references={"notes.md": "a note"})
    (folder / "references" / "same.md").symlink_to(folder / "references" / "notes.md")
    assert check_skills(tmp_path / "skills") == []
    secret = tmp_path / "secret.txt"
    secret.write_text("gold")
    (folder / "references" / "shadow").symlink_to(secret)
    (err,) = check_skills(tmp_path / "skills")
    assert "a symlink out of the skill" in str(err) and "references/shadow" in str(err)


def _pack(root: Path) -> Path:
    """A benchmark's skill pack: two hand-written skills in one folder."""
    for name in ("alpha-rule", "beta-rule"):
        write_skill(root, name, f"Use when {name} applies.", "Do the thing.", meta={"metadata": {"hand_written": True}})
    return root


def test_seed_skills_name_a_pack_its_skills_alone_or_paths_and_unknown_names_list_what_is_known(tmp_path):
    from evolver.skills import hand_written, seed_skill_folders, shipped_skill

    pack = _pack(tmp_path / "pack")
    packs = {"toy-pack": pack, "listed": [pack / "beta-rule"]}
    assert [f.name for f in seed_skill_folders(["toy-pack"], packs)] == ["alpha-rule", "beta-rule"]
    assert seed_skill_folders(["beta-rule"], packs) == [pack / "beta-rule"]  # one skill of a pack, by name
    assert seed_skill_folders(["listed", "toy-pack", "writing-skills"], packs) == \
        [pack / "beta-rule", pack / "alpha-rule", shipped_skill("writing-skills")]  # named twice: kept once
    assert seed_skill_folders([str(pack / "alpha-rule")]) == [pack / "alpha-rule"]
    assert all(hand_written((f / "SKILL.md").read_text()) for f in seed_skill_folders(["toy-pack"], packs))
    assert not hand_written((shipped_skill("writing-skills") / "SKILL.md").read_text())
    with pytest.raises(SkillError) as err:
        seed_skill_folders(["toy-pak"], packs)
    assert "seed skill 'toy-pak'" in str(err.value) and "pack toy-pack: alpha-rule, beta-rule" in str(err.value)
    assert "shipped: writing-skills" in str(err.value)
    with pytest.raises(SkillError, match="no skill packs"):
        seed_skill_folders(["toy-pack"])
    write_skill(tmp_path / "other", "alpha-rule", "Use when alpha.", "Other.")
    with pytest.raises(SkillError, match="two skills named 'alpha-rule'"):
        seed_skill_folders(["toy-pack", str(tmp_path / "other" / "alpha-rule")], packs)


def test_seed_skills_as_a_plain_string_is_a_comma_separated_list():
    from evolver.config import Config, load_config

    assert Config(seed_skills="toy-pack").seed_skills == ["toy-pack"]
    assert Config(seed_skills="a, b").seed_skills == ["a", "b"] and Config().seed_skills is None
    assert load_config(None, ["seed_skills=toy-pack"]).seed_skills == ["toy-pack"]
    assert load_config(None, ['seed_skills=["toy-pack"]']).seed_skills == ["toy-pack"]
    assert load_config(None, ["seed_skills=[]"]).seed_skills == []


def test_the_pack_condition_plays_a_program_with_the_benchmarks_hand_written_skills_instead_of_its_own(tmp_path):
    import shutil as _shutil

    from evolver import Program, variant
    from evolver.harness import SEED_DIR
    from evolver.skills import write_skill

    root = tmp_path / "prog"
    _shutil.copytree(SEED_DIR, root)
    write_skill(root / "skills", "learned", "Use when learning.", "Take the first step, then the second one.")
    pack = tmp_path / "pack"
    write_skill(pack, "solver", "Use when solving by hand.", "Compute the answer, then type it exactly.",
                meta={"metadata": {"hand_written": True}})
    program = Program("p", "c", str(root), "h")
    prog, tmp = variant(program, "pack", [], packs={"experts": pack})
    try:
        names = sorted(p.name for p in (Path(prog.root) / "skills").iterdir() if p.is_dir())
        assert names == ["solver"] and prog.hash != program.hash
    finally:
        _shutil.rmtree(tmp)
    with pytest.raises(ValueError, match="no hand-written skill pack"):
        variant(program, "pack", [], packs={})
