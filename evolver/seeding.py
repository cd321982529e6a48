"""The seed program: the configured harness, its prompt and the seed skills, committed once as ``seed``.

Every run starts from it and every gain is measured against it.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from evolver import plugins, tempdirs
from evolver.harness import SEED_DIR
from evolver.run import Run
from evolver.skills import seed_skill_folders
from evolver.types import Program

SEED_ID = "seed"


def seed_files(harness: str = "default", skills: list[str] = (), system_prompt: str | None = None,
               packs: dict | None = None, into: Path | None = None) -> Path:
    """A folder with the seed program: prompt.md (``system_prompt``, a benchmark's own, else the generic
    one), skills/ (``skills``: folders copied in, see :func:`evolver.skills.seed_skill_folders`; ``packs``:
    the benchmark's ``skill_packs``, whose names expand to their skills), harness/harness.py. ``into``: the
    folder to make (it must not exist); None: a new temp folder, which the caller removes."""
    entry = plugins.get("harness", harness)
    folders = seed_skill_folders(list(skills), packs)  # an unknown name fails here, before anything is made
    if into is None:
        tmp = Path(tempdirs.make("evolver-seed-"))
    else:
        tmp = Path(into)
        tmp.mkdir(parents=True)
    if system_prompt:
        (tmp / "prompt.md").write_text(system_prompt.strip() + "\n")
    else:
        shutil.copy(SEED_DIR / "prompt.md", tmp / "prompt.md")
    (tmp / "skills").mkdir()
    (tmp / "skills" / ".keep").write_text("")
    for folder in folders:
        shutil.copytree(folder, tmp / "skills" / folder.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (tmp / "harness").mkdir()
    shutil.copy(entry.factory, tmp / "harness" / "harness.py")
    return tmp


def ensure_seed(run: Run) -> Program:
    """The workspace's seed program (id ``seed``): the configured harness, prompt and seed skills (the
    config's ``seed_skills``, else the benchmark's; names of the benchmark's ``skill_packs`` expand to their
    skills), committed on the first call and recorded under ``run``; later calls check it out."""
    skills = run.config.seed_skills
    files = seed_files(run.config.harness, getattr(run.benchmark, "seed_skills", []) if skills is None else skills,
                       (getattr(run.benchmark, "harness_hints", None) or {}).get("system_prompt"),
                       getattr(run.benchmark, "skill_packs", None))
    try:
        program = run.repo.init(files, {"id": SEED_ID, "operator": "seed", "parent": "",
                                        "model": run.config.role("executor").model or "embedded"})
    finally:
        shutil.rmtree(files, ignore_errors=True)
    if run.store.get_program(SEED_ID, run_id=run.id) is None:
        run.store.add_program(SEED_ID, run.id, program.commit, program.hash, "", "seed", "", program.manifest)
    return run.repo.checkout(SEED_ID)
