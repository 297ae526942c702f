"""The repository's import graph, read from the source: one node per module file, one edge per
import of another module of the repository — module level, inside functions and under
`TYPE_CHECKING` alike (any of them can close a cycle or cross a layer)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def top_level_packages() -> list[str]:
    """The repository's own packages: every top-level folder with an `__init__.py`."""
    return sorted(path.parent.name for path in ROOT.glob("*/__init__.py"))


@dataclass(frozen=True)
class Module:
    name: str
    path: Path

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


@cache
def modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for package in top_level_packages():
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = Module(".".join(parts), path)
    return found


def owner(name: str) -> str | None:
    """The repository module that `name` (possibly `module.attribute`) resolves to."""
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imported_names(module: Module) -> Iterator[str]:
    """Every absolute module name `module` imports (relative imports resolved)."""
    for node in ast.walk(ast.parse(module.path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules() else base


@cache
def edges() -> dict[str, frozenset[str]]:
    """Module -> the repository modules it imports."""
    graph: dict[str, frozenset[str]] = {}
    for name, module in modules().items():
        targets = {owner(imported) for imported in imported_names(module)}
        graph[name] = frozenset(target for target in targets if target is not None and target != name)
    return graph


def cycles() -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    graph = edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph[node]):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")
