"""The public API (``evolver/__init__.py``): first-party plugins import nothing else, every name in it
resolves and documents its contract, it stays small, and ``import evolver`` stays cheap. A plugin uses
another plugin only through the ``__all__`` of that plugin's top-level package."""
from __future__ import annotations

import ast
import dataclasses
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


# -- plugins among themselves: only through another plugin's declared public names --------------------------

def plugin_packages() -> dict[str, Path]:
    """Each first-party plugin's top-level package name and its ``__init__.py``."""
    return {p.parent.name: p for p in sorted(ROOT.glob("plugins/*/evolver_*/__init__.py"))}


def static_value(node: ast.AST) -> object:
    """A literal, or a dict built of literals and ``**dict.fromkeys([...], value)`` (how ``_API`` is written)."""
    if isinstance(node, ast.Dict):
        out = {}
        for key, value in zip(node.keys, node.values):
            if key is None:  # **dict.fromkeys(names, where)
                names, where = (static_value(a) for a in value.args)
                out.update(dict.fromkeys(names, where))
            else:
                out[static_value(key)] = static_value(value)
        return out
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "list" and isinstance(node.args[0], ast.Name):
        return ("list", node.args[0].id)  # list(_API): resolved by declared_api
    return ast.literal_eval(node)


def declared_api(init: Path) -> tuple[list[str] | None, dict[str, str], dict[str, str]]:
    """A plugin package's ``__all__`` (None when it declares none), its ``_API`` (public name -> where it
    lives) and ``_CONSTANTS``, read from the source so no plugin (nor torch) is imported."""
    found: dict[str, object] = {}
    for node in ast.parse(init.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id in ("__all__", "_API", "_CONSTANTS") and node.value is not None:
            found[target.id] = static_value(node.value)
    names = found.get("__all__")
    if isinstance(names, tuple):
        names = list(found[names[1]])
    return names, found.get("_API", {}), found.get("_CONSTANTS", {})


def cross_plugin_violations(path: Path, own: str, apis: dict[str, list[str]]) -> list[str]:
    """What ``path`` (in plugin package ``own``) takes from another plugin beyond ``from evolver_x import
    <a name in evolver_x.__all__>``."""
    found = []

    def bad(node: ast.AST, what: str) -> None:
        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {what}")

    def other(module: str) -> str | None:
        top = module.split(".")[0]
        return top if top in apis and top != own else None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and other(node.module):
            top = other(node.module)
            if node.module != top:
                bad(node, f"from {node.module} import ...: a module inside {top}; import its public names from {top}")
                continue
            for alias in node.names:
                if alias.name not in apis[top]:
                    bad(node, f"from {top} import {alias.name}: not in {top}.__all__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if other(alias.name):
                    bad(node, f"import {alias.name}: use `from {other(alias.name)} import <public name>`")
        elif isinstance(node, ast.Call):
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            args = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
            if fn in ("import_module", "__import__") and args and isinstance(args[0], str) and other(args[0]):
                bad(node, f"{fn}({args[0]!r}): another plugin's module; import its public names")
    return found


def test_plugins_use_each_other_only_through_declared_names():
    packages = plugin_packages()
    assert len(packages) > 10, "the plugins/ tree was not found"
    apis = {}
    for name, init in packages.items():
        declared, _, _ = declared_api(init)
        assert declared is not None, f"{init.relative_to(ROOT)} declares no __all__ (its public names; [] for none)"
        apis[name] = declared
    problems = [v for path in plugin_sources()
                for v in cross_plugin_violations(path, path.relative_to(ROOT).parts[2], apis)]
    assert not problems, "plugins reach into each other:\n" + "\n".join(problems)


def top_level_defs(source: Path) -> dict[str, ast.AST]:
    """The functions, classes and assigned names at the top of a module, by name."""
    defs: dict[str, ast.AST] = {}
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name):
                defs[target.id] = node
    return defs


def test_every_plugin_public_name_is_defined_with_its_contract():
    """Each name in a plugin's ``_API`` is defined where it says, with a docstring (a constant: an entry in the
    package's ``_CONSTANTS``); read from the source, so torch need not load."""
    problems = []
    for package, init in plugin_packages().items():
        declared, api, constants = declared_api(init)
        assert set(declared or []) <= set(api), f"{package}.__all__ names what its _API does not place"
        for name, where in api.items():
            module, _, attr = where.partition(":")
            assert module.split(".")[0] == package, f"{package}.{name} lives in another package: {module}"
            source = init.parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
            node = top_level_defs(source).get(attr or name)
            if node is None:
                problems.append(f"{package}.{name}: {where} defines no {attr or name}")
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not ast.get_docstring(node):
                problems.append(f"{package}.{name}: {where} has no docstring")
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and not constants.get(name):
                problems.append(f"{package}.{name}: a constant without an entry in {package}._CONSTANTS")
    assert not problems, "\n".join(problems)


def test_the_plugin_check_catches_what_it_should(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text("from evolver_grpo.engines import make_engine\nimport evolver_grpo.checkpoint\n"
                   "from evolver_grpo import _API, save\nimportlib.import_module('evolver_grpo.trainer')\n"
                   "from evolver_grpo import make_engine\nfrom evolver_mine.inner import x\n")
    apis = {"evolver_grpo": ["make_engine"], "evolver_mine": []}
    assert len(cross_plugin_violations(bad, "evolver_mine", apis)) == 5


#: Public classes that only group related helpers (``Skills.parse``): each member is documented too.
NAMESPACES = ("Skills", "SkillChecks", "Harnesses", "Demos", "Traces")
MAX_PUBLIC_NAMES = 60  # issue 39: the API is what plugins use, not everything the core has


def undocumented(name: str, value: object, constants: dict[str, str]) -> bool:
    """True when ``value`` (public as ``name``) says nothing of its contract: a class or function without a
    docstring of its own (a dataclass's generated signature is none), a constant without an entry in
    ``constants`` (its package's ``_CONSTANTS``)."""
    if inspect.isclass(value):
        doc = value.__dict__.get("__doc__") or ""
        return not doc.strip() or doc.startswith(f"{value.__name__}(")
    if callable(value):
        return not (inspect.getdoc(value) or "").strip()
    return not constants.get(name, "").strip()


def test_every_public_name_resolves_with_its_contract():
    assert len(set(evolver.__all__)) == len(evolver.__all__)
    assert set(evolver.__all__) <= set(dir(evolver))
    missing = [n for n in evolver.__all__ if undocumented(n, getattr(evolver, n), evolver._CONSTANTS)]
    assert not missing, f"public names without a docstring (a constant: without an entry in _CONSTANTS): {missing}"
    assert not [n for n in evolver.__all__ if n.startswith("_")]
    assert set(evolver._CONSTANTS) <= set(evolver.__all__), "_CONSTANTS describes a name that is not public"
    for space in NAMESPACES:
        members = {k: getattr(getattr(evolver, space), k) for k in vars(getattr(evolver, space)) if not k.startswith("_")}
        assert members, space
        bare = [k for k, v in members.items() if (inspect.isclass(v) or callable(v)) and undocumented(k, v, {})]
        assert not bare, f"{space} members without a docstring: {bare}"


def test_the_public_api_stays_small():
    assert len(evolver.__all__) <= MAX_PUBLIC_NAMES, (
        f"{len(evolver.__all__)} public names: fold related helpers into one name (a namespace class or a method "
        "of a public class), or leave out what no plugin uses (tests import core modules directly)")


def test_the_docstring_check_catches_what_it_should():
    class Bare:
        pass

    def bare():
        pass

    @dataclasses.dataclass
    class Generated:
        x: int

    assert undocumented("Bare", Bare, {}) and undocumented("bare", bare, {}) and undocumented("G", Generated, {})
    assert undocumented("LIMIT", 3, {}) and not undocumented("LIMIT", 3, {"LIMIT": "How many at most."})
    assert not undocumented("undocumented", undocumented, {})


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
