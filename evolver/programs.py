"""The git repository of programs: one commit per program, one branch per candidate, tags that mean something.

Layout under the workspace ``root`` (e.g. ``store/``)::

    programs/              the repository; its own working tree holds branch ``main`` = the seed program
      program.toml         manifest: id, parent, operator, proposal, model, created, [scores]
      prompt.md  skills/<name>/SKILL.md  harness/harness.py
    worktrees/<id>/        one worktree per candidate being built or evaluated (branch ``cand/<id>``)
    worktrees/_view-<id>/  detached, read-only-use checkouts of existing programs

Tags: ``program/<id>`` on every program's commit, ``frontier/<id>`` on frontier members and ``best`` (moved by
the caller). So ``git log --all --graph --decorate`` in ``programs/`` tells the run's story without evolver.

Git is driven through GitPython's command interface (``git.Git.execute``: one short git process per
operation) rather than its object database: those calls are thread-safe, while GitPython's persistent
cat-file helpers are not, and candidates are built from several threads. Operations that move refs or
worktrees hold one lock per workspace.
"""
from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import tarfile
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import git
import tomli_w

from evolver.errors import ProgramRepoError, RepoDamagedError
from evolver.program_files import (MANIFEST, clean_scores, content_hash, counts_for_hash,  # noqa: F401
                                   dump_manifest, now_iso, program_hash, skill_version)  # content_hash: re-exported
from evolver.types import Program

SCORES_NOTES = "refs/notes/scores"
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_GITIGNORE = "__pycache__/\n*.pyc\n"
_LOCKS: dict[str, threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()
#: Set when evolver runs inside a git hook; they would redirect every command to the outer repository.
_LEAKED_GIT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")
#: What git says about a broken object or pack (then the error says how to check and recover).
_NO_SPACE = re.compile(r"No space left on device|Out of diskspace|Disk quota exceeded|File too large", re.I)
def _low_space(path: Path) -> int | None:
    """The bytes free where ``path`` lies when under 1 MiB (a full disk), else None."""
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return None
    return free if free < 1 << 20 else None


_DAMAGED = re.compile(r"\bcorrupt|unable to unpack|inflate:|missing (?:blob|tree|commit|tag|object)|bad object|"
                      r"invalid (?:object|sha1 pointer)|packfile .* cannot be accessed|hash mismatch|bad packed object")


class ProgramRepo:
    """The program repository (``<workspace>/programs``, git): one branch per candidate, tags for frontier
    members; ``checkout(ref)`` gives a :class:`evolver.Program`, ``manifest(ref)`` its program.toml."""

    #: ``ProgramRepo.content_hash(folder)``: the hash of a program's files that keys the evaluation cache.
    content_hash = staticmethod(content_hash)

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.path = self.root / "programs"
        self.worktrees_dir = self.root / "worktrees"
        with _LOCKS_GUARD:
            self._lock = _LOCKS.setdefault(str(self.root), threading.RLock())
            # GitPython starts every git process from a copy of os.environ (it can add variables, not drop
            # them), so a leaked outer-repository variable is dropped from the process once, here.
            for key in _LEAKED_GIT_ENV:
                os.environ.pop(key, None)
        self._cmd = git.Git(self.path)  # GitPython's command interface on the repository

    # --- plumbing -------------------------------------------------------------------------------------

    def _git(self, *args: str, cwd: Path | None = None, input: bytes | str | None = None,
             binary: bool = False, check: bool = True, env: dict | None = None):
        """Run ``git ARGS`` in the repository (or ``cwd``, a worktree): its stdout, text or ``binary``;
        a failure (with ``check``) is a :class:`ProgramRepoError` naming the command, folder and git's words."""
        where = Path(cwd or self.path)
        failed = f"git {' '.join(args[:3])} failed in {where}"
        if not where.is_dir():  # GitPython would quietly run it in the process's current folder instead
            raise ProgramRepoError(f"{failed}: no such folder")
        cmd = self._cmd if cwd is None else git.Git(where)
        # GitPython takes stdin as a file, not bytes.
        with tempfile.TemporaryFile() if input is not None else contextlib.nullcontext() as stdin:
            if stdin is not None:
                stdin.write(input.encode() if isinstance(input, str) else input)
                stdin.seek(0)
            try:
                status, out, err = cmd.execute(
                    [git.Git.GIT_PYTHON_GIT_EXECUTABLE, *args], istream=stdin,
                    with_extended_output=True, with_exceptions=False, stdout_as_string=False,
                    strip_newline_in_stdout=False, env={"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", **(env or {})})
            except git.GitCommandNotFound as exc:
                raise ProgramRepoError(f"{failed}: git is not installed or not on PATH ({exc})") from exc
        if check and status != 0:
            said = _NO_SPACE.search(err)
            free = None if said else _low_space(where)  # git's lock writes fail without errno's words
            if said or free is not None:  # systemic like a damaged repository: the run stops, and resumes later
                why = "" if said else f" ({os.strerror(errno.ENOSPC)}: {free} bytes free in {where})"
                raise RepoDamagedError(f"{failed}: {err.strip()}{why}\nThe disk is full (or over a quota): free "
                                       "space, then `evolver run --resume`")
            if _DAMAGED.search(err):
                raise RepoDamagedError(f"{failed}: {err.strip()}{self._damaged_hint(err)}")
            raise ProgramRepoError(f"{failed}: {err.strip()}")
        return out if binary else out.decode(errors="replace").rstrip("\n")

    def _damaged_hint(self, err: str = "") -> str:
        sha = re.search(r"\b([0-9a-f]{40})\b", err)
        loose = self.path / ".git" / "objects" / sha[1][:2] / sha[1][2:] if sha else None
        where = (f"the object file {loose}" if loose is not None and loose.exists()
                 else "git names the broken object above")
        return (f"\nThe program repository {self.path} is damaged ({where}; "
                f"`git -C {self.path} fsck` lists them all). Restore the folder from a backup; or move the whole "
                "workspace aside and start again with a fresh --store (its programs and the store's records of "
                "them belong together)")

    @property
    def exists(self) -> bool:
        return (self.path / ".git").exists()

    def _check_id(self, program_id: str) -> str:
        if not isinstance(program_id, str) or not _ID_RE.match(program_id):
            raise ProgramRepoError(f"bad program id {program_id!r}: use letters, digits, '.', '_' and '-' "
                                   "(starting with a letter or digit, at most 100 chars)")
        return program_id

    def _ref_exists(self, ref: str) -> bool:
        return bool(self._git("rev-parse", "--verify", "--quiet", ref + "^{commit}", check=False))

    def _worktrees(self) -> list[dict]:
        """``git worktree list --porcelain`` as dicts: path, branch (or None), prunable."""
        out = []
        for block in self._git("worktree", "list", "--porcelain").split("\n\n"):
            fields = dict(line.partition(" ")[::2] for line in block.splitlines())
            if "worktree" in fields:
                out.append({"path": Path(fields["worktree"]), "prunable": "prunable" in fields,
                            "branch": fields.get("branch", "").removeprefix("refs/heads/") or None})
        return out

    def _program(self, sha: str, root: Path) -> Program:
        manifest = self.manifest(sha)
        return Program(id=manifest.get("id", sha[:12]), commit=sha, root=str(root), hash=self.hash_at(sha),
                       manifest=manifest)

    # --- creating programs ------------------------------------------------------------------------------

    def init(self, seed_dir: Path, manifest: dict) -> Program:
        """Create the repository with the seed program on ``main``; an existing repository is left alone.

        The repository is built in a folder beside ``programs/`` and renamed into place once its first
        commit exists, so a run killed meanwhile leaves no half-made repository; one left by an older
        version (a ``.git`` without ``main`` and without any other branch or tag) is moved aside and rebuilt."""
        with self._lock:
            if self.exists:
                if self._ref_exists("main"):
                    # main holds only the seed (a scores amend replaces that root commit, and main moves with it)
                    return self._program(self._git("rev-list", "--max-parents=0", "main").split()[0], self.path)
                if self._git("rev-parse", "--verify", "--quiet", "refs/heads/main", check=False):
                    # main is there but its commit does not read: a damaged repository, never an incomplete one
                    self._git("cat-file", "-t", "refs/heads/main")  # raises with git's words and the file
                    raise RepoDamagedError(f"branch main of {self.path} does not point at a commit"
                                           + self._damaged_hint(self._git("rev-parse", "refs/heads/main")))
                self._set_aside_incomplete()
            seed_id = self._check_id(manifest.get("id", ""))
            self.worktrees_dir.mkdir(parents=True, exist_ok=True)
            for stale in self.root.glob(".programs-building-*"):  # a build a killed run left behind
                shutil.rmtree(stale, ignore_errors=True)
            build = self.root / f".programs-building-{os.getpid()}"
            build.mkdir(parents=True)
            self._git("init", "--initial-branch=main", cwd=build)
            for key, value in (("user.name", "evolver"), ("user.email", "evolver@localhost"),
                               ("core.quotepath", "off"), ("commit.gpgsign", "false"),
                               ("tag.gpgsign", "false")):
                self._git("config", key, value, cwd=build)
            shutil.copytree(seed_dir, build, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))
            base = build / MANIFEST
            full = {**(tomllib.loads(base.read_text()) if base.is_file() else {}), **manifest}
            full.setdefault("operator", "seed")
            full.setdefault("created", now_iso())
            base.write_text(dump_manifest(full))
            if not (build / ".gitignore").exists():
                (build / ".gitignore").write_text(_GITIGNORE)
            self._git("add", "-A", cwd=build)
            self._git("commit", "-q", "-m", f"seed: {seed_id}", "-m", "operator: seed", cwd=build)
            sha = self._git("rev-parse", "HEAD", cwd=build)
            self._git("tag", "-f", f"program/{seed_id}", sha, cwd=build)
            if self.path.exists() and not any(self.path.iterdir()):
                self.path.rmdir()
            if self.path.exists():
                shutil.rmtree(build, ignore_errors=True)
                raise ProgramRepoError(f"{self.path} exists and is not a program repository: move it away "
                                       "or choose another --store")
            os.rename(build, self.path)  # atomic: the repository appears whole or not at all
            return self._program(sha, self.path)

    def _set_aside_incomplete(self) -> None:
        """A ``.git`` without ``main``: a seed whose creation was killed (older versions built it in place)."""
        if self._git("for-each-ref").strip():  # fails (with git's words) on a damaged repository
            raise ProgramRepoError(f"{self.path} is a git repository without a 'main' branch but with other "
                                   "branches or tags: not a program repository evolver made. Move it away, "
                                   "or choose another --store")
        aside = self.root / f"programs.incomplete-{time.strftime('%Y%m%d-%H%M%S')}"
        self.path.rename(aside)
        print(f"evolver: {self.path} held a program repository whose creation was interrupted (no seed "
              f"commit); moved it to {aside} and creating it again", file=sys.stderr)

    def new_candidate(self, candidate_id: str, parent_ref: str) -> Path:
        """A worktree at ``worktrees/<id>`` on a new branch ``cand/<id>`` from the parent's commit.

        Calling it again for an existing candidate returns (and if needed re-adds) its worktree."""
        self._check_id(candidate_id)
        parent = self.resolve(parent_ref)
        path = self.worktrees_dir / candidate_id
        branch = f"cand/{candidate_id}"
        with self._lock:
            for wt in self._worktrees():
                if wt["branch"] == branch and wt["path"].is_dir():
                    return wt["path"]
            self.worktrees_dir.mkdir(parents=True, exist_ok=True)
            self._git("worktree", "prune")
            if self._ref_exists(f"refs/heads/{branch}"):
                self._git("worktree", "add", "-q", str(path), branch)
            else:
                self._git("worktree", "add", "-q", "-b", branch, str(path), parent)
        return path

    def commit_candidate(self, candidate_id: str, manifest: dict, message: str) -> Program:
        """Commit everything in the candidate's worktree with its manifest; tag ``program/<id>``.

        A change that touches nothing but the manifest still commits; the caller sees it as
        ``program.hash == parent.hash``. A manifest without ``model`` keeps the parent's (the model is
        behaviour); every other key comes from ``manifest`` alone."""
        path = self.worktrees_dir / candidate_id
        if not path.is_dir():
            raise ProgramRepoError(f"no worktree for candidate {candidate_id!r} at {path}: call new_candidate first")
        inherited = tomllib.loads((path / MANIFEST).read_text()) if (path / MANIFEST).is_file() else {}
        full = {**({"model": inherited["model"]} if "model" in inherited else {}), **manifest}
        if full.setdefault("id", candidate_id) != candidate_id:
            raise ProgramRepoError(f"manifest id {full['id']!r} differs from candidate id {candidate_id!r}")
        full.setdefault("created", now_iso())
        (path / MANIFEST).write_text(dump_manifest(full))
        body = "\n".join(f"{k}: {full[k]}" for k in ("operator", "parent", "proposal") if full.get(k) is not None)
        with self._lock:
            self._git("add", "-A", cwd=path)
            self._git("commit", "-q", "--allow-empty", "-m", message.strip() or f"candidate {candidate_id}",
                      *(["-m", body] if body else []), cwd=path)
            sha = self._git("rev-parse", "HEAD", cwd=path)
            self._git("tag", "-f", f"program/{candidate_id}", sha)
        return self._program(sha, path)

    def record_scores(self, program_id: str, scores: dict) -> str:
        """Merge ``scores`` into the program's ``[scores]`` and return the commit that now carries them.

        Scores are known only after evaluation, when normally no child exists yet, so the commit is amended
        (the content hash is unchanged: scores are not behaviour) and ``program/<id>`` plus any other tag on
        it (``frontier/<id>``, ``best``) move to the new commit. Once a child branch has grown from the
        commit (e.g. test-split scores recorded at the end), amending would split the lineage in two, so
        the scores go into a git note (``refs/notes/scores``) instead; :meth:`manifest` and :meth:`log`
        merge notes over the file, and ``git log`` shows them.
        """
        with self._lock:
            sha = self.resolve(f"program/{program_id}")
            manifest = self.manifest(sha)
            merged = {**manifest.get("scores", {}), **clean_scores(scores)}
            own = f"refs/heads/cand/{program_id}"
            if not self._ref_exists(own):
                own = "refs/heads/main"
            tags, blocked = [], False
            for line in self._git("for-each-ref", "--contains", sha, "--format=%(objectname) %(refname)").splitlines():
                target, ref = line.split(" ", 1)
                if ref.startswith("refs/notes/") or (ref == own and target == sha):
                    continue
                if ref.startswith("refs/tags/") and target == sha:
                    tags.append(ref.removeprefix("refs/tags/"))
                else:
                    blocked = True  # a descendant (or a child branch not yet committed to) exists
            if blocked:
                self._git("notes", f"--ref={SCORES_NOTES}", "add", "-f", "-m",
                          tomli_w.dumps({"scores": merged}), sha)
                # Shown by plain `git log` from now on (set only once the ref exists: git warns otherwise).
                self._git("config", "notes.displayRef", SCORES_NOTES)
                return sha
            new = self._amend_manifest(sha, {**manifest, "scores": merged})
            if self._git("rev-parse", own, check=False) == sha:
                self._git("update-ref", own, new, sha)
            for tag in tags:
                self._git("tag", "-f", tag, new)
            self._sync_worktree(own, new)
            return new

    def _amend_manifest(self, sha: str, manifest: dict) -> str:
        """A copy of commit ``sha`` whose program.toml is ``manifest`` (same parents, author, message).

        Done with plumbing, so it works whether or not a worktree holds the branch."""
        blob = self._git("hash-object", "-w", "--stdin", input=dump_manifest(manifest))
        entries = [e for e in self._git("ls-tree", sha).splitlines() if not e.endswith(f"\t{MANIFEST}")]
        tree = self._git("mktree", input="\n".join(entries + [f"100644 blob {blob}\t{MANIFEST}"]) + "\n")
        name, email, date, parents, msg = self._git(
            "log", "-1", "--format=%an%x00%ae%x00%aI%x00%P%x00%B", sha).split("\0", 4)
        parent_args = [a for p in parents.split() for a in ("-p", p)]
        return self._git("commit-tree", tree, *parent_args, "-F", "-", input=msg + "\n",
                         env={"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date})

    def _sync_worktree(self, branch_ref: str, sha: str):
        """A worktree on the moved branch gets the new program.toml, so its status stays clean."""
        for wt in self._worktrees():
            if wt["branch"] and f"refs/heads/{wt['branch']}" == branch_ref and wt["path"].is_dir():
                (wt["path"] / MANIFEST).write_bytes(self._git("show", f"{sha}:{MANIFEST}", binary=True))
                self._git("reset", "-q", "--", MANIFEST, cwd=wt["path"])

    # --- worktrees ----------------------------------------------------------------------------------

    def remove_worktree(self, candidate_id: str):
        """Drop the candidate's worktree; its branch and tag stay (the program remains in history)."""
        path = self.worktrees_dir / candidate_id
        with self._lock:
            if any(wt["path"] == path for wt in self._worktrees()) and path.is_dir():
                self._git("worktree", "remove", "--force", str(path))
            shutil.rmtree(path, ignore_errors=True)
            self._git("worktree", "prune")

    def checkout(self, ref: str) -> Program:
        """A detached worktree ``worktrees/_view-<id>`` at the program's commit, reused when already there
        and unmodified (a modified view is restored first)."""
        sha = self.resolve(ref)
        pid = self.manifest(sha).get("id") or sha[:12]
        path = self.worktrees_dir / f"_view-{pid}"
        with self._lock:
            registered = any(wt["path"] == path and not wt["prunable"] for wt in self._worktrees())
            if registered and path.is_dir():
                # A view is shared by every reader of the program: if anything edited it in place
                # (a proposer writing to its parent instead of its own worktree), restore it.
                if (self._git("rev-parse", "HEAD", cwd=path) != sha
                        or self._git("status", "--porcelain", "--untracked-files=all", cwd=path)):
                    self._git("checkout", "-q", "--force", "--detach", sha, cwd=path)
                    self._git("clean", "-q", "-fdx", cwd=path)
            else:
                shutil.rmtree(path, ignore_errors=True)
                self._git("worktree", "prune")
                self.worktrees_dir.mkdir(parents=True, exist_ok=True)
                self._git("worktree", "add", "-q", "--detach", str(path), sha)
        return self._program(sha, path)

    def gc_worktrees(self) -> list[str]:
        """After a crash: forget worktrees whose folder vanished, delete folders git does not know.

        Returns the paths cleaned up."""
        with self._lock:
            known = self._worktrees()
            gone = [str(wt["path"]) for wt in known if wt["prunable"] or not wt["path"].is_dir()]
            self._git("worktree", "prune")
            registered = {wt["path"] for wt in known}
            if self.worktrees_dir.is_dir():
                for folder in self.worktrees_dir.iterdir():
                    if folder.is_dir() and folder not in registered:
                        shutil.rmtree(folder, ignore_errors=True)
                        gone.append(str(folder))
            return gone

    # --- tags and lookups -----------------------------------------------------------------------------

    def tag(self, name: str, ref: str):
        with self._lock:
            self._git("tag", "-f", name, self.resolve(ref))

    def untag(self, name: str):
        with self._lock:
            self._git("tag", "-d", name, check=False)

    def tags(self, prefix: str = "frontier/") -> dict[str, str]:
        """Tag name → commit, for tags starting with ``prefix``."""
        out = self._git("for-each-ref", "refs/tags/", "--format=%(refname:strip=2) %(objectname)")
        return dict(line.split(" ", 1) for line in out.splitlines() if line.startswith(prefix))

    def branches(self, prefix: str = "cand/") -> list[str]:
        """Branch names after ``prefix`` (candidate ids for ``cand/``), including abandoned ones."""
        if not self.exists:
            return []
        out = self._git("for-each-ref", f"refs/heads/{prefix}", "--format=%(refname:strip=2)")
        return [line[len(prefix):] for line in out.splitlines() if line.startswith(prefix)]

    def resolve(self, ref: str) -> str:
        """Commit sha of a program id, tag, branch or sha prefix."""
        for candidate in (f"refs/tags/program/{ref}", str(ref), f"refs/heads/cand/{ref}"):
            if candidate and not candidate.startswith("-"):
                sha = self._git("rev-parse", "--verify", "--quiet", candidate + "^{commit}", check=False)
                if sha:
                    return sha
        known = sorted(self.tags("program/"))
        shown = ", ".join(k.removeprefix("program/") for k in known[:8])
        more = f" (and {len(known) - 8} more)" if len(known) > 8 else ""
        raise ProgramRepoError(f"unknown program or ref {ref!r}; known programs: {shown or '(none)'}{more}")

    def hash_at(self, ref: str) -> str:
        """:func:`content_hash` of a commit, from its tree (no checkout needed)."""
        sha = self.resolve(ref)
        entries = {}
        for line in self._git("ls-tree", "-r", "-z", "--full-tree", sha).split("\0"):
            if line:
                meta, rel = line.split("\t", 1)
                mode, kind, oid = meta.split()
                if kind == "blob" and counts_for_hash(rel):
                    entries[rel] = oid
        return program_hash(entries, self.manifest(sha).get("model"))

    def _scores_notes(self) -> dict[str, str]:
        """commit → note blob, for commits whose scores live in a note."""
        out = self._git("notes", f"--ref={SCORES_NOTES}", "list", check=False)
        return {commit: blob for blob, commit in (line.split() for line in out.splitlines() if line.strip())}

    def _read_blobs(self, specs: list[str]) -> list[str | None]:
        """Many ``<rev>:<path>`` blobs in one ``git cat-file --batch`` call (None where missing)."""
        if not specs:
            return []
        raw, out, pos = self._git("cat-file", "--batch", input="\n".join(specs) + "\n", binary=True), [], 0
        for _ in specs:
            end = raw.index(b"\n", pos)
            header = raw[pos:end].split()
            if len(header) == 3 and header[1] != b"missing":
                size = int(header[2])
                out.append(raw[end + 1:end + 1 + size].decode(errors="replace"))
                pos = end + 1 + size + 1
            else:
                out.append(None)
                pos = end + 1
        return out

    def manifest(self, ref: str) -> dict:
        sha = self.resolve(ref)
        text = self._git("show", f"{sha}:{MANIFEST}", check=False)
        manifest = tomllib.loads(text) if text else {}
        blob = self._scores_notes().get(sha)
        if blob:
            note = tomllib.loads(self._git("cat-file", "blob", blob))
            manifest["scores"] = {**manifest.get("scores", {}), **note.get("scores", {})}
        return manifest

    def log(self) -> list[dict]:
        """Every program commit on every branch, parents before children."""
        out = self._git("log", "--exclude=refs/notes/*", "--all", "--topo-order", "--reverse",
                        "--format=%H%x1f%s")
        rows = [line.split("\x1f", 1) for line in out.splitlines() if line]
        tags: dict[str, list[str]] = {}
        for name, sha in self.tags("").items():
            tags.setdefault(sha, []).append(name)
        notes = self._scores_notes()
        texts = self._read_blobs([f"{sha}:{MANIFEST}" for sha, _ in rows])
        note_texts = dict(zip(notes, self._read_blobs(list(notes.values()))))
        result = []
        for (sha, subject), text in zip(rows, texts):
            if text is None:
                continue  # not a program commit
            m = tomllib.loads(text)
            scores = {**m.get("scores", {}), **tomllib.loads(note_texts.get(sha) or "").get("scores", {})}
            result.append({"id": m.get("id"), "commit": sha, "parent": m.get("parent"),
                           "operator": m.get("operator"), "scores": scores, "message": subject,
                           "tags": sorted(tags.get(sha, []))})
        return result

    def skill_history(self, name: str) -> list[dict]:
        """The versions of skill ``name`` across programs: every commit on any branch that changed
        ``skills/<name>``, parents before children, as dicts (id, commit, date, operator, message, version:
        the SKILL.md front matter's ``version`` or ``metadata.version``, deleted). Empty when no program has it."""
        if not self.exists or not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            return []
        out = self._git("log", "--exclude=refs/notes/*", "--all", "--topo-order", "--reverse",
                        "--format=%H%x1f%aI%x1f%s", "--", f"skills/{name}")
        rows = [line.split("\x1f", 2) for line in out.splitlines() if line]
        texts = self._read_blobs([f"{sha}:{path}" for sha, _, _ in rows
                                  for path in (MANIFEST, f"skills/{name}/SKILL.md")])
        result = []
        for (sha, date, subject), manifest, skill in zip(rows, texts[::2], texts[1::2]):
            m = tomllib.loads(manifest) if manifest else {}
            result.append({"id": m.get("id", sha[:12]), "commit": sha, "date": date, "operator": m.get("operator"),
                           "message": subject, "version": skill_version(skill), "deleted": skill is None})
        return result

    def skill_names(self) -> list[str]:
        """Every skill name that any program has or had."""
        if not self.exists:
            return []
        out = self._git("log", "--exclude=refs/notes/*", "--all", "--format=", "--name-only", "--", "skills/")
        return sorted({p.split("/")[1] for p in out.splitlines() if p.count("/") >= 2})

    def hand_written_skills(self, ref: str) -> list[str]:
        """The skills of the program at ``ref`` whose front matter says ``metadata.hand_written: true``
        (a benchmark's hand-written pack, not learned); reports label such programs."""
        from evolver.skills import hand_written

        sha = self.resolve(ref)
        paths = [p for p in self._git("ls-tree", "-r", "--name-only", "--full-tree", sha, "--", "skills/").splitlines()
                 if p.count("/") == 2 and p.endswith("/SKILL.md")]
        return [p.split("/")[1] for p, text in zip(paths, self._read_blobs([f"{sha}:{p}" for p in paths]))
                if hand_written(text)]

    def diff(self, a: str, b: str) -> str:
        """Unified diff of every program file (skills, prompt, harness, manifest) from ``a`` to ``b``."""
        return self._git("diff", "--no-color", "--no-ext-diff", self.resolve(a), self.resolve(b))

    def files(self, ref: str) -> dict[str, str]:
        """Path → text of every file of the program at ``ref``."""
        raw = self._git("archive", "--format=tar", self.resolve(ref), binary=True)
        out = {}
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    out[member.name] = tar.extractfile(member).read().decode(errors="replace")
        return dict(sorted(out.items()))

    def show(self, ref: str) -> str:
        """A readable dump: manifest, file list, prompt and every SKILL.md."""
        sha = self.resolve(ref)
        files = self.files(sha)
        manifest = self.manifest(sha)
        parts = [f"# program {manifest.get('id', '?')} (commit {sha[:12]})", dump_manifest(manifest).rstrip(),
                 "", "## files", *(f"- {p}" for p in files)]
        for path in ["prompt.md"] + [p for p in files if p.startswith("skills/") and p.endswith("/SKILL.md")]:
            if path in files:
                parts += ["", f"## {path}", files[path].rstrip()]
        return "\n".join(parts) + "\n"
