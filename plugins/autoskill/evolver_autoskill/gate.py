"""The outcome gate and retirement: bank changes are kept only when outcomes support them.

- :class:`OutcomeGate`: after an add or merge commit, score the bank before and after it on a
  validation set; a change that makes the score worse (beyond ``tolerance``) is reverted with a commit
  that names both scores. The reference AutoSkill never checks a merge against outcomes.
- :func:`retire_useless`: a skill retrieved at least ``min_uses`` times whose outcomes with it are no
  better than without it is removed, as a commit naming the counts.
- :class:`BenchmarkValidator`: the validation score of a bank = the core harness playing a benchmark
  split with the bank's skills (the same evaluator `evolver run` uses).
"""
from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from evolver_autoskill import records
from evolver_autoskill.bank import SkillBank


def export_skills(bank: SkillBank, commit: str, dest: Path) -> Path:
    """The bank's ``skills/`` folder as it was at ``commit``, written under ``dest``."""
    raw = subprocess.run(["git", "archive", "--format=tar", commit, "skills"], cwd=bank.path,
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        tar.extractall(dest, filter="data")
    return dest / "skills"


@dataclass
class GateResult:
    commit: str
    before: float
    after: float
    kept: bool
    revert_commit: str | None = None


class OutcomeGate:
    def __init__(self, validate: Callable[[Path], float], tolerance: float = 0.0):
        """``validate(skills_dir) -> score`` (higher is better); scores of a tree are cached by its id."""
        self.validate, self.tolerance = validate, tolerance
        self._cache: dict[str, float] = {}

    def _score(self, bank: SkillBank, commit: str) -> float:
        tree = bank._git("rev-parse", f"{commit}^{{tree}}")
        if tree not in self._cache:
            tmp = Path(tempfile.mkdtemp(prefix="autoskill-gate-"))
            try:
                self._cache[tree] = float(self.validate(export_skills(bank, commit, tmp)))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return self._cache[tree]

    def check(self, bank: SkillBank, commit: str, store=None) -> GateResult:
        before = self._score(bank, f"{commit}~1")
        after = self._score(bank, commit)
        if after >= before - self.tolerance:
            return GateResult(commit, before, after, True)
        reason = f"outcome gate: validation score {before:.3f} -> {after:.3f} (tolerance {self.tolerance})"
        revert = bank.revert(commit, reason)
        if store is not None:
            records.log_event(store, bank.scope, "revert", None, None, revert, [f"commit:{commit}"], reason,
                              {"before": before, "after": after})
        return GateResult(commit, before, after, False, revert)


def retire_useless(bank: SkillBank, store, min_uses: int = 5, margin: float = 0.0) -> list[tuple[str, str]]:
    """Retire skills retrieved >= ``min_uses`` times whose mean outcome with them is not above the mean
    without them by more than ``margin`` (both sides need scored outcomes). Returns (skill, commit)."""
    names = {c.name for c in bank.cards()}
    out = []
    for row in records.usage(store, bank.scope):
        if row["skill"] not in names or row["retrieved"] < min_uses or not row["with_n"] or not row["without_n"]:
            continue
        if row["with_score"] <= row["without_score"] + margin:
            reason = (f"retired: retrieved {row['retrieved']} times, injected {row['injected']}; mean outcome "
                      f"with it {row['with_score']:.3f} (n={row['with_n']}) vs without {row['without_score']:.3f} "
                      f"(n={row['without_n']})")
            commit = bank.retire(row["skill"], reason)
            records.log_event(store, bank.scope, "retire", row["skill"], None, commit, [], reason, row)
            out.append((row["skill"], commit))
    return out


class BenchmarkValidator:
    """Scores a skills folder by playing ``tasks`` with the default harness and ``backend``."""

    def __init__(self, benchmark, backend, tasks: list, prompt: str | None = None):
        self.benchmark, self.backend, self.tasks, self.prompt = benchmark, backend, tasks, prompt

    def __call__(self, skills_dir: Path) -> float:
        from evolver import Harnesses, Program, ProgramRepo, run_episodes

        root = Path(tempfile.mkdtemp(prefix="autoskill-val-"))
        try:
            (root / "harness").mkdir()
            shutil.copy(Harnesses.SEED_DIR / "harness" / "harness.py", root / "harness" / "harness.py")
            (root / "prompt.md").write_text(self.prompt if self.prompt is not None
                                            else (Harnesses.SEED_DIR / "prompt.md").read_text())
            shutil.copytree(skills_dir, root / "skills")
            program = Program(id="autoskill-validation", commit="", root=str(root), hash=ProgramRepo.content_hash(root))
            episodes = run_episodes(Harnesses.context(program), self.benchmark, self.backend, self.tasks,
                                    use_cache=False)
            return sum(e.score for e in episodes) / max(1, len(episodes))
        finally:
            shutil.rmtree(root, ignore_errors=True)
