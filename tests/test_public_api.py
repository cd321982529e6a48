"""The public API (``evolver/__init__.py``): first-party plugins import nothing else, every name in it
resolves and documents its contract, and ``import evolver`` stays cheap."""
from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import evolver

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "duckdb")
#: Private attributes of other libraries' objects a plugin may read: the check is about evolver's own.
OTHERS_PRIVATE = {"_attn_implementation"}  # transformers' model config: the attention kind has no public name


def plugin_sources() -> list[Path]:
    """Every module of every first-party plugin, its tests excluded (tests may use core internals)."""
    return sorted(p for p in ROOT.glob("plugins/*/**/*.py")
                  if p.relative_to(ROOT).parts[2] != "tests" and ".egg-info" not in str(p))


def violations(path: Path) -> list[str]:
    """What ``path`` takes from evolver beyond ``from evolver import <public name>``."""
    found = []

    def bad(node: ast.AST, what: str) -> None:
        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {what}")

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("evolver."):
                bad(node, f"from {node.module} import ...: import from `evolver` (the public API) instead")
            elif node.module == "evolver":
                for alias in node.names:
                    if alias.name.startswith("_") or alias.name not in evolver.__all__:
                        bad(node, f"from evolver import {alias.name}: not in evolver.__all__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("evolver."):
                    bad(node, f"import {alias.name}: import from `evolver` (the public API) instead")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "evolver":
            if node.attr not in evolver.__all__:
                bad(node, f"evolver.{node.attr}: not in evolver.__all__")
        elif isinstance(node, ast.Call):
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            args = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
            if fn in ("import_module", "__import__") and args and str(args[0]).startswith("evolver."):
                bad(node, f"{fn}({args[0]!r}): import from `evolver` (the public API) instead")
            if fn == "getattr" and len(args) > 1 and str(args[1]).startswith("_") and args[1] not in OTHERS_PRIVATE:
                bad(node, f"getattr(..., {args[1]!r}): a private attribute; ask for a public one")
    return found


def test_plugins_import_only_the_public_api():
    sources = plugin_sources()
    assert len(sources) > 20, "the plugins/ tree was not found"
    problems = [v for path in sources for v in violations(path)]
    assert not problems, "plugins reach past the public API:\n" + "\n".join(problems)


def test_the_check_catches_what_it_should(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text("import evolver.store\nfrom evolver.cli import open_workspace\nfrom evolver import _API, plugins\n"
                   "import evolver\nevolver.loop\ngetattr(b, '_base_model')\n"
                   "from evolver import Task, hookimpl\n")
    assert len(violations(bad)) == 6


def test_every_public_name_resolves_with_its_contract():
    assert len(set(evolver.__all__)) == len(evolver.__all__)
    assert set(evolver.__all__) <= set(dir(evolver))
    undocumented = []
    for name in evolver.__all__:
        value = getattr(evolver, name)
        if inspect.isclass(value):
            doc = value.__dict__.get("__doc__") or ""
            if not doc or doc.startswith(f"{value.__name__}("):  # a dataclass's generated signature is no contract
                undocumented.append(name)
        elif callable(value) and not inspect.getdoc(value):
            undocumented.append(name)
    assert not undocumented, f"public names without a docstring: {undocumented}"
    assert not [n for n in evolver.__all__ if n.startswith("_")]


def test_unknown_names_are_attribute_errors():
    try:
        evolver.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("evolver.no_such_name resolved")


def test_import_evolver_is_cheap():
    code = ("import sys, evolver\n"
            "from evolver import hookimpl, Benchmark, Env, Task, Proposer, Trainer, Skill, EvolverError\n"
            f"loaded = [m for m in {HEAVY!r} if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
