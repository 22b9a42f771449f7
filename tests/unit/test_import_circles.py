"""No import circle in the package: every module's imports (at any depth: inside functions and
``if TYPE_CHECKING:`` blocks too, relative ones resolved) form a graph without a cycle."""

import ast
from pathlib import Path

import blackbox_mia

PACKAGE = Path(blackbox_mia.__file__).resolve().parent
NAME = PACKAGE.name


def module_name(path: Path) -> str:
    parts = (NAME, *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path, name: str) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported(path: Path, name: str, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports: ``import a.b`` names a.b; ``from a import b``
    names a.b where that is a module, else a. (Importing a.b runs ``a/__init__`` first too; that
    edge is left out, as every package whose ``__init__`` re-exports its modules would otherwise
    be a circle.)"""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package_of(path, name).split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    modules = set(paths)
    return {name: imported(path, name, modules) for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_reads_relative_and_nested_imports():
    graph = import_graph()
    assert "blackbox_mia.backends.api.tracker.config" in graph["blackbox_mia.backends.api.tracker.strategies"]  # TYPE_CHECKING
    assert "blackbox_mia.datasets" in graph["blackbox_mia.canary.dataset"]  # from .. import datasets


def test_no_import_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])
