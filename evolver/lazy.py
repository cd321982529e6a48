"""Names a package loads on first use (PEP 562), so importing it stays cheap."""
from __future__ import annotations

import importlib
from typing import Callable


def lazy_names(package: str, namespace: dict, api: dict[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package`` for ``api`` (name -> ``"module"`` or ``"module:attr"``):
    it imports a name's module on first use and keeps the value in ``namespace`` (the package's
    ``globals()``), so later lookups are plain attribute reads."""
    def __getattr__(name: str) -> object:
        where = api.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = where.partition(":")
        value = getattr(importlib.import_module(module), attr or name)
        namespace[name] = value
        return value
    return __getattr__
