"""A skill bank: one git repository per user scope, one commit per version of a skill.

Layout under the bank root (``<workspace>/autoskill/``)::

    <scope>/               a git repository (branch main)
      skills/<name>/SKILL.md
    tags <name>/v<version> on the commit that wrote each version

Every change is a commit whose message names what happened and the evidence it came from
(``conversation:<id>``, ``episode:<id>``), so ``git log -- skills/<name>`` in a scope's folder is the
skill's version chain, and a harmful change is undone with a revert commit, never by rewriting history.
Separate repositories (not folders of one) keep users' banks apart and let two scopes commit at once.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

from evolver import EvolverError
from evolver_autoskill.card import SkillCard, read_card, write_card

_SCOPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_LOCKS: dict[str, threading.RLock] = {}
_GUARD = threading.Lock()


class BankError(EvolverError):
    pass


def scope_folder(scope: str | None) -> str:
    """A safe folder name for a user scope. Scopes come from requests (an e-mail, a uuid): anything
    outside ``[A-Za-z0-9._-]`` is replaced and a short hash added, so two scopes never share a bank."""
    scope = (scope or "default").strip() or "default"
    if _SCOPE_RE.match(scope) and scope not in (".", ".."):
        return scope
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", scope).strip("._-")[:48] or "scope"
    return f"{safe}-{hashlib.sha256(scope.encode()).hexdigest()[:8]}"


class SkillBank:
    def __init__(self, root: Path, scope: str | None = None):
        self.scope = (scope or "default").strip() or "default"
        self.path = Path(root).resolve() / scope_folder(self.scope)
        self.skills_dir = self.path / "skills"
        with _GUARD:
            self.lock = _LOCKS.setdefault(str(self.path), threading.RLock())
        self._cache: tuple[str, list[SkillCard]] | None = None
        self._head: str | None = None  # every commit goes through this object, which updates it
        with self.lock:
            if not (self.path / ".git").exists():
                self._init()

    # -- git plumbing ---------------------------------------------------------------------------

    def _git(self, *args: str, check: bool = True) -> str:
        env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
        env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
        done = subprocess.run(["git", *args], cwd=self.path, capture_output=True, env=env)
        if check and done.returncode != 0:
            raise BankError(f"git {' '.join(args[:2])} failed in bank {self.path}: "
                            f"{done.stderr.decode(errors='replace').strip()}")
        return done.stdout.decode(errors="replace").rstrip("\n")

    def _init(self) -> None:
        self.skills_dir.mkdir(parents=True, exist_ok=True)
        self._git("init", "-q", "--initial-branch=main")
        for key, value in (("user.name", "evolver-autoskill"), ("user.email", "autoskill@localhost"),
                           ("commit.gpgsign", "false"), ("tag.gpgsign", "false")):
            self._git("config", key, value)
        (self.path / "README.md").write_text(
            f"# AutoSkill bank for scope {self.scope!r}\n\nOne commit per skill version; "
            "`git log -- skills/<name>` is a skill's history, tags `<name>/v<version>` mark versions.\n")
        (self.skills_dir / ".keep").write_text("")
        self._git("add", "-A")
        self._git("commit", "-q", "-m", f"bank: scope {self.scope}")

    def _commit(self, subject: str, evidence: list[str], note: str = "") -> str:
        body = []
        if evidence:
            body.append("evidence: " + ", ".join(evidence))
        if note:
            body.append(note)
        self._git("add", "-A")
        self._git("commit", "-q", "-m", subject, *(["-m", "\n".join(body)] if body else []))
        self._cache = None
        return self.refresh()

    def head(self) -> str:
        """The current commit. Cached: retrieval asks on every request, and a ``git rev-parse`` costs a
        process; commits made through this object update it, :meth:`refresh` re-reads it."""
        return self._head or self.refresh()

    def refresh(self) -> str:
        self._head = self._git("rev-parse", "HEAD")
        return self._head

    # -- reading ---------------------------------------------------------------------------------

    def cards(self) -> list[SkillCard]:
        """Every card, by name; cached until the next commit (retrieval indexes key on :meth:`head`)."""
        with self.lock:
            head = self.head()
            if self._cache is None or self._cache[0] != head:
                folders = sorted(p for p in self.skills_dir.iterdir() if p.is_dir()) if self.skills_dir.is_dir() else []
                self._cache = (head, [read_card(p) for p in folders])
            return list(self._cache[1])

    def card(self, name: str) -> SkillCard | None:
        return next((c for c in self.cards() if c.name == name), None)

    def history(self, name: str) -> list[dict]:
        """The commits that touched one skill, oldest first: commit, subject, evidence."""
        out = self._git("log", "--reverse", "--format=%H%x1f%s%x1f%b%x1e", "--", f"skills/{name}")
        rows = []
        for block in filter(None, (b.strip("\n") for b in out.split("\x1e"))):
            sha, subject, body = (block.split("\x1f") + ["", ""])[:3]
            ev = next((line[len("evidence: "):].split(", ") for line in body.splitlines()
                       if line.startswith("evidence: ")), [])
            rows.append({"commit": sha, "subject": subject, "evidence": ev})
        return rows

    def log(self) -> list[str]:
        return self._git("log", "--reverse", "--format=%s").splitlines()

    def versions(self) -> dict[str, list[str]]:
        """Skill name -> its version tags, oldest first (retired skills keep their tags)."""
        out: dict[str, list[str]] = {}
        for tag in self._git("tag", "--list", "--sort=creatordate").splitlines():
            name, _, version = tag.rpartition("/v")
            if name:
                out.setdefault(name, []).append(version)
        return out

    # -- changing --------------------------------------------------------------------------------

    def add(self, card: SkillCard, evidence: list[str], note: str = "") -> str:
        with self.lock:
            if (self.skills_dir / card.name).exists():
                raise BankError(f"skill {card.name!r} already exists in scope {self.scope!r}: merge into it instead")
            write_card(self.skills_dir, card)
            sha = self._commit(f"add {card.name} v{card.version}", evidence, note)
            self._git("tag", "-f", f"{card.name}/v{card.version}", sha)
            return sha

    def merge(self, card: SkillCard, evidence: list[str], note: str = "") -> str:
        """Replace an existing skill with its merged rewrite (whose version the caller bumped)."""
        with self.lock:
            old = self.card(card.name)
            if old is None:
                raise BankError(f"cannot merge into {card.name!r}: no such skill in scope {self.scope!r}")
            if old.version == card.version:
                raise BankError(f"merge of {card.name!r} keeps version {card.version}: bump it (card.bump)")
            shutil.rmtree(self.skills_dir / card.name)
            write_card(self.skills_dir, card)
            sha = self._commit(f"merge {card.name} v{old.version} -> v{card.version}", evidence, note)
            self._git("tag", "-f", f"{card.name}/v{card.version}", sha)
            return sha

    def retire(self, name: str, reason: str, evidence: list[str] = ()) -> str:
        with self.lock:
            if not (self.skills_dir / name).exists():
                raise BankError(f"cannot retire {name!r}: no such skill in scope {self.scope!r}")
            shutil.rmtree(self.skills_dir / name)
            return self._commit(f"retire {name}", list(evidence), reason)

    def revert(self, commit: str, reason: str) -> str:
        """Undo one commit with a new commit (history is kept: the harmful version stays inspectable)."""
        with self.lock:
            subject = self._git("log", "-1", "--format=%s", commit)
            self._git("revert", "--no-commit", commit)
            return self._commit(f"revert {subject}", [], f"reverts {commit}\n{reason}")
