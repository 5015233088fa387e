"""The library's imports: no cycle hidden behind an import inside a function, and the stdlib-only
``vprof.common`` imported at the top of each module (a function-level import is for start-up
time)."""

from __future__ import annotations

import ast
from pathlib import Path

from library import LIBRARY, PACKAGE_DIRS

ROOT = Path(__file__).resolve().parents[1]
# Cycles still there, each through an import inside a function; listed so that no new module
# joins them and no new cycle appears.
KNOWN_CYCLES = (
    {"vprof.records.arrays", "vprof.records.schema", "vprof.records.store"},
    {"vprof.runs.distributed", "vprof.runs.loadgen"},
)
# vprof.common modules that import a third-party library (yaml): importing them inside a
# function keeps start-up fast
NOT_STDLIB_ONLY = {"vprof.common.yamlfile"}


def _modules() -> dict[str, Path]:
    """Every library module by its import name."""
    package_of = {folder: name for name, folder in PACKAGE_DIRS.items()}
    found = {}
    for folder in LIBRARY:
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            tail = parts[:-1] if parts[-1] == "__init__" else parts
            found[".".join((package_of[folder], *tail))] = path
    return found


def _imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """The module's imports (not those only for type checkers), each with whether it sits
    inside a function."""
    skip: set[int] = set()
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside.update(id(n) for n in ast.walk(node))
    return [
        (node, id(node) in inside)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skip
    ]


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the library modules it imports (its own packages, imported first anyway, left
    out)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for node, _ in _imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif node.module:
                targets = [
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in modules
                    else node.module
                    for alias in node.names
                ]
            else:
                targets = []
            deps |= {t for t in targets if t in modules and not f"{name}.".startswith(f"{t}.")}
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_hides_behind_an_import_inside_a_function():
    cycles = _cycles(_graph(_modules()))
    new = [sorted(c) for c in cycles if not any(c <= known for known in KNOWN_CYCLES)]
    assert new == [], "move what both sides need down a floor"


def test_a_cycle_through_a_function_level_import_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [{"a", "b", "c"}]


def test_vprof_common_is_imported_at_the_top_of_each_module():
    late = []
    for path in sorted(_modules().values()):
        for node, in_function in _imports(ast.parse(path.read_text())):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if in_function and module and module.startswith("vprof.common"):
                if module not in NOT_STDLIB_ONLY:
                    late.append(f"{path.relative_to(ROOT)}:{node.lineno}: {module}")
    assert late == []
