"""The package's layout: no import cycle between darknet_py's modules, and no C++ in the Python package.

Read from the source with `ast` (nothing is imported), so it is cheap (under a second) and checks the
tree as written. Two graphs: the imports that run when a module is imported (module level), and every
import, those inside functions included: a cycle hidden behind an import inside a function still
ties two modules together, so both must be free of cycles. Imports under `if TYPE_CHECKING:` never
run and are left out.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "darknet_py"
EXTENSIONS = {"darknet_py._core"}  # compiled from src-bindings/; it imports no Python module of ours


def module_name(path: Path) -> str:
    parts = ("darknet_py",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> Dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(tree: ast.Module, module_level_only: bool) -> List[ast.stmt]:
    """The import statements that can run: at module level (inside if/try too), or anywhere."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif _type_checking_block(node):
            todo.extend(node.orelse)
        elif module_level_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        else:
            todo.extend(ast.iter_child_nodes(node))
    return found


def _resolve(importer: str, is_package: bool, node: ast.stmt, known: Set[str]) -> Set[str]:
    """The modules of the package that an import statement loads (the module, or for
    `from P import name`, P.name where that is a module, else P)."""
    if isinstance(node, ast.Import):
        targets = {alias.name for alias in node.names}
    else:
        if node.level:
            package = importer.split(".") if is_package else importer.split(".")[:-1]
            base = ".".join(package[:len(package) - node.level + 1])
            source = base + ("." + node.module if node.module else "")
        else:
            source = node.module or ""
        targets = {f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names}
    # `import darknet_py.a.b` loads darknet_py.a.b; its packages' __init__ run too, but darknet_py's own
    # always runs first whatever is imported, so it is an edge only when named (`from .. import __version__`)
    return {t for t in targets if t in known and t != importer}


@functools.lru_cache(maxsize=None)
def _trees() -> Dict[str, Tuple[Path, ast.Module]]:
    return {name: (path, ast.parse(path.read_text(), filename=str(path))) for name, path in modules().items()}


def import_graph(module_level_only: bool) -> Dict[str, Set[str]]:
    trees = _trees()
    known = set(trees) | EXTENSIONS
    graph: Dict[str, Set[str]] = {name: set() for name in EXTENSIONS}
    for name, (path, tree) in trees.items():
        graph[name] = set().union(*(_resolve(name, path.name == "__init__.py", node, known)
                                    for node in _imports(tree, module_level_only)))
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One cycle as [a, b, ..., a], or None: a depth-first search that meets a module on its own path."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def test_find_cycle_names_the_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_graph_sees_imports_inside_functions_and_skips_type_checking():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n"
                     "from ..c import x\n\ndef f():\n    from . import d\n")
    known = {"p", "p.q", "p.q.a", "p.q.b", "p.c", "p.q.d"}

    def edges(module_level_only):
        return set().union(*(_resolve("p.q.a", False, n, known) for n in _imports(tree, module_level_only)))

    assert edges(True) == {"p.c"}
    assert edges(False) == {"p.c", "p.q.d"}


@pytest.mark.parametrize("module_level_only", [True, False], ids=["module-level", "all-imports"])
def test_no_import_cycle(module_level_only):
    graph = import_graph(module_level_only)
    # the graph is the package's: cli imports evaluate's parser inside build_parser, so only there
    assert ("darknet_py.evaluation.evaluate" in graph["darknet_py.commands.cli"]) != module_level_only
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_cpp_in_the_python_package():
    stray = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*")
             if p.suffix in {".cpp", ".cc", ".h", ".hpp", ".mm"}]
    assert not stray, f"C++ sources in python/darknet_py (they belong in src-bindings/): {stray}"


def test_every_subpackage_says_what_is_inside():
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 40, f"{init.relative_to(PACKAGE)}: no docstring saying what is inside"
