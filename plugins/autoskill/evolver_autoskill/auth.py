"""API keys for ``evolver serve``: each key is bound to the user scopes (skill banks) it may read and write.

Keys come from ``[plugins.autoskill] keys = {"KEY" = ["alice"]}`` and from ``keys_file``, a TOML file of the
same shape that can live outside the repository (``chmod 600``). A client sends ``Authorization: Bearer KEY``.
Only SHA-256 digests of the keys are kept, compared with ``hmac.compare_digest`` against every entry (no early
exit), so neither the comparison nor the loop's length tells how much of a guess was right.

Without keys the server is open: it then listens on a loopback address only (:func:`check_exposure`).
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import sys
import tomllib
from pathlib import Path

from evolver import ConfigError, EvolverError
from evolver_autoskill.bank import scope_folder

MIN_KEY_CHARS = 16  # a guessable key is no key: 16 characters of secrets.token_urlsafe are 96 bits
MAKE_KEY = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
HOW_TO_CONFIGURE = (
    "configure API keys, each bound to its scopes: a keys file (TOML, one line per key: "
    '"<key>" = ["alice"]; chmod 600) named by `--set plugins.autoskill.keys_file=\'"/path/keys.toml"\'`, '
    f"or `[plugins.autoskill] keys = {{\"<key>\" = [\"alice\"]}}` in evolver.toml; make a key with {MAKE_KEY}")


def normalize_scope(scope: str | None) -> str:
    """The scope as a bank names it (``SkillBank.scope``): stripped, empty meaning "default"."""
    return (scope or "default").strip() or "default"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def _hint(key: str) -> str:
    """Enough of a key to find it in a file, never the key."""
    return f"{key[:4]}... ({len(key)} chars)" if len(key) >= MIN_KEY_CHARS else f"of {len(key)} chars"


class Keys:
    """Key digests and their scopes. ``scopes_for(token)`` is the key's scopes, or None for an unknown key."""

    def __init__(self, entries: dict[str, list[str]]):
        self._entries: list[tuple[bytes, list[str]]] = []
        folders: dict[str, str] = {}
        for key, scopes in entries.items():
            if not isinstance(key, str) or len(key) < MIN_KEY_CHARS or key != key.strip() or " " in key:
                raise ConfigError(f"API key {_hint(str(key))}: a key needs at least {MIN_KEY_CHARS} characters "
                                  f"and no spaces; make one with {MAKE_KEY}")
            if (not isinstance(scopes, list) or not scopes
                    or not all(isinstance(s, str) and s.strip() for s in scopes)):
                raise ConfigError(f"API key {_hint(key)}: its value must be a non-empty list of scope names, "
                                  'e.g. ["alice"] (the first is used when a request names no scope)')
            clean = list(dict.fromkeys(normalize_scope(s) for s in scopes))
            for scope in clean:  # two distinct scopes sharing one bank folder would share its skills
                other = folders.setdefault(scope_folder(scope), scope)
                if other != scope:
                    raise ConfigError(f"scopes {other!r} and {scope!r} map to the same skill bank folder "
                                      f"{scope_folder(scope)!r}: rename one")
            self._entries.append((_digest(key), clean))

    def __len__(self) -> int:
        return len(self._entries)

    def scopes_for(self, token: str | None) -> list[str] | None:
        if not token:
            return None
        digest, found = _digest(token), None
        for known, scopes in self._entries:  # every entry, always: the time does not depend on which matched
            if hmac.compare_digest(known, digest):
                found = scopes
        return found


def load_keys(options) -> Keys:
    """The keys of ``options.keys`` and ``options.keys_file`` (a key in both is an error)."""
    entries = dict(options.keys or {})
    if options.keys_file:
        path = Path(options.keys_file).expanduser()
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"plugins.autoskill.keys_file: cannot read {path.resolve()} ({exc.strerror})") from None
        try:
            from_file = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: not a TOML keys file ({exc}); write one line per key: "
                              '"<key>" = ["alice", "team"]') from None
        if os.name == "posix" and path.stat().st_mode & 0o077:
            print(f"evolver serve: warning: {path} is readable by other users; `chmod 600 {path}`", file=sys.stderr)
        both = sorted(set(from_file) & set(entries))
        if both:
            raise ConfigError(f"API key {_hint(both[0])} is both in [plugins.autoskill] keys and in {path}: keep one")
        entries.update(from_file)
    return Keys(entries)


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # another host name: it may resolve to anything, so it counts as exposed
        return False


def check_exposure(host: str, keys: Keys | None) -> None:
    """An open server (no keys) may listen on loopback only: anyone who can reach it reads every bank."""
    if not keys and not is_loopback(host):
        raise EvolverError(f"evolver serve: refusing to listen on {host} without API keys: anyone who can reach "
                           f"it would read and write every user's skill bank. Either {HOW_TO_CONFIGURE}; "
                           "or listen on 127.0.0.1 (the default)")


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
