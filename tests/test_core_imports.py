"""The core's modules import each other without a cycle, counting the imports inside functions too: a
function-local import that closes a cycle only hides it. And no private name crosses a module boundary."""
from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "evolver"


def module_name(path: Path, root: Path) -> str:
    parts = (root.name,) + path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """(module -> the package's modules it imports anywhere in its file, [(module, private name, line)]
    of private names it imports from another module). The package itself (its ``__init__``) is left
    out as a target: it loads its public names lazily, so importing it imports nothing else."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    private: list[tuple[str, str, int]] = []
    for name, path in files.items():
        graph[name] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package
                    for _ in range(node.level - 1):
                        up = up.rpartition(".")[0]
                    base = f"{up}.{base}" if base else up
                if base.split(".")[0] != root.name:
                    continue
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
                private += [(name, f"{base}.{a.name}", node.lineno) for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__") and resolve(base) != name]
            else:
                continue
            for target in targets:
                got = resolve(target) if target.split(".")[0] == root.name else None
                if got and got != name and got != root.name:
                    graph[name].add(got)
    return graph, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_core_has_no_import_cycle_even_through_imports_inside_functions():
    graph, _ = import_graph(CORE)
    assert len(graph) > 40 and "evolver.playing" in graph["evolver.loop"]
    assert cycles(graph) == [], "import cycles in the core (split the shared part into its own module)"


def test_no_private_name_crosses_a_module_boundary_in_the_core():
    _, private = import_graph(CORE)
    assert private == [], "private names imported from another module: make them public there, or move them"


def test_the_checker_finds_a_cycle_hidden_in_a_function_and_a_private_import(tmp_path):
    pkg = tmp_path / "evolver"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from evolver.b import thing\n")
    (pkg / "b.py").write_text("def thing():\n    from evolver.c import _helper\n    return _helper\n")
    (pkg / "c.py").write_text("import evolver.a\n_helper = 1\n")
    graph, private = import_graph(pkg)
    assert cycles(graph) == [["evolver.a", "evolver.b", "evolver.c"]]
    assert private == [("evolver.b", "evolver.c._helper", 2)]
