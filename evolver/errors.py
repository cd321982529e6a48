"""The errors a user sees. Each message says what went wrong and what to do about it."""
from __future__ import annotations


class EvolverError(Exception):
    """Base class: the CLI prints these as one clean message, no traceback."""


class ConfigError(EvolverError):
    """A bad configuration value or option; the message names the key and what it accepts."""


class PluginError(EvolverError):
    """A plugin that cannot load, or that rejected the options it was made with."""


class UnknownNameError(EvolverError):
    """An unknown benchmark, backend, proposer, ...: the message lists the known ones, then ``hint`` (what
    to install or set to get this one) when there is one."""

    def __init__(self, kind: str, name: str, known: list[str], hint: str = ""):
        self.kind, self.name, self.known, self.hint = kind, name, sorted(known), hint
        super().__init__(f"unknown {kind} {name!r}; known {kind}s: {', '.join(self.known) or '(none)'}"
                         + (f". {hint}" if hint else ""))


class SkillError(EvolverError):
    """A malformed skill, naming the file and (when known) the line."""

    def __init__(self, path: str, message: str, line: int | None = None):
        self.path, self.line, self.message = str(path), line, message
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")


class StoreLockedError(EvolverError):
    """The trace store is open in another process (DuckDB allows one writer)."""


class QueryError(EvolverError):
    """SQL the trace store rejected (a user's `evolver traces` query)."""


class ProgramRepoError(EvolverError):
    """A git operation on the program repository failed, or a program reference does not resolve."""


class RepoDamagedError(ProgramRepoError):
    """The program repository cannot be used safely (a broken object, or no space left to write one): a run
    stops, and resumes once the cause is fixed."""


class StoreIOError(EvolverError):
    """The store's file cannot be read or written: it is damaged, or its disk is full. A run stops."""


class BackendError(EvolverError):
    """A systemic backend failure (cannot load the model, server unreachable after retries)."""


class BenchmarkError(EvolverError):
    """A systemic benchmark failure (the game engine died, a dataset is missing); never a bad action."""
