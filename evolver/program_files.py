"""What a program folder's files mean, apart from git: the manifest (``program.toml``) and how it is written,
the content hash that identifies a program's behaviour (and keys the episode cache), a skill's version."""
from __future__ import annotations

import hashlib
import os
import tomllib
from datetime import datetime, timezone
from pathlib import Path

import tomli_w

from evolver.skills import front_matter
from evolver.types import stable_hash

MANIFEST = "program.toml"
_KEY_ORDER = ("id", "parent", "operator", "proposal", "model", "created")


def counts_for_hash(rel: str) -> bool:
    """Files that decide behaviour. The manifest is bookkeeping except its ``model`` (added separately)."""
    parts = rel.split("/")
    return not (rel in (MANIFEST, ".gitignore") or parts[0] == ".git" or "__pycache__" in parts
                or rel.endswith(".pyc"))


def _blob_sha(data: bytes) -> str:
    """Git's blob id, so a folder on disk and a commit's tree hash identically without reading blobs."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def program_hash(entries: dict[str, str], model: str | None) -> str:
    """The content hash of files ``{path: blob id}`` played with ``model``."""
    return stable_hash(sorted(entries.items()), model or "")


def content_hash(path: Path) -> str:
    """Content hash of a program folder: every behaviour-deciding file plus the manifest's ``model``.

    Two commits with the same files share it (so they share cached episodes) whatever their id, parent
    or scores.
    """
    path = Path(path)
    entries = {}
    for p in path.rglob("*"):
        rel = p.relative_to(path).as_posix()
        if (p.is_file() or p.is_symlink()) and counts_for_hash(rel):
            entries[rel] = _blob_sha(os.readlink(p).encode() if p.is_symlink() else p.read_bytes())
    manifest = tomllib.loads((path / MANIFEST).read_text()) if (path / MANIFEST).is_file() else {}
    return program_hash(entries, manifest.get("model"))


def clean_scores(value):
    """TOML has no null: drop None values (recursively) instead of failing."""
    if isinstance(value, dict):
        return {str(k): clean_scores(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [clean_scores(v) for v in value if v is not None]
    return value


def dump_manifest(manifest: dict) -> str:
    m = clean_scores(manifest)
    ordered = {k: m[k] for k in _KEY_ORDER if k in m}
    ordered.update({k: v for k, v in m.items() if k not in ordered and k != "scores"})
    ordered["scores"] = m.get("scores", {})
    return tomli_w.dumps(ordered)


def now_iso() -> str:
    """Now, in UTC, to the second: a manifest's ``created``."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def skill_version(text: str | None) -> str | None:
    """``version`` (or ``metadata.version``) from a SKILL.md's front matter; None without one. Lenient: a
    history listing should not fail on an old, malformed version of a skill."""
    data = front_matter(text)
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    version = data.get("version", meta.get("version"))
    return None if version is None else str(version)
