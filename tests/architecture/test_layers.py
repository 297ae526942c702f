"""Imports run one way: train_core <- kitchen <- recipes; adapters use train_core and kitchen's
ports; the engine names no backend; adapters never import each other (only the neutral
`adapters.common`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imports(package: str) -> Iterator[tuple[str, str]]:
    """(module file, imported module) for every import in `package`, lazy ones included."""
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                yield from ((str(path.relative_to(ROOT)), alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                yield str(path.relative_to(ROOT)), node.module


def top(name: str) -> str:
    return name.split(".")[0]


@pytest.mark.parametrize(("package", "forbidden"), [("train_core", {"kitchen", "adapters", "recipes"})])
def test_train_core_imports_no_higher_layer(package: str, forbidden: set[str]) -> None:
    assert [(f, m) for f, m in imports(package) if top(m) in forbidden] == []


def test_kitchen_imports_no_recipe_and_no_adapter() -> None:
    assert [(f, m) for f, m in imports("kitchen") if top(m) in {"recipes", "adapters"}] == []


def test_adapters_import_no_other_adapter_and_no_recipe() -> None:
    crossings = []
    for file, module in imports("adapters"):
        parts = module.split(".")
        if parts[0] == "recipes":
            crossings.append((file, module))
        if parts[0] == "adapters" and len(parts) > 1:
            owner = Path(file).parts[1]
            if parts[1] not in {owner, "common"}:
                crossings.append((file, module))
    assert crossings == []


def test_the_layer_test_sees_real_imports() -> None:
    """Guards the guard: the walker finds the imports it is meant to police."""
    assert ("kitchen/plugins.py", "importlib.metadata") in set(imports("kitchen"))
    assert any(module.startswith("adapters.common") for _, module in imports("adapters"))
