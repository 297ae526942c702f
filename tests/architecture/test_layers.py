"""Imports run one way, as `kitchen.layers` declares: train_core <- kitchen <- recipes; adapters
use train_core and the engine and never import each other (only the neutral `adapters.common`);
the sandbox imports only train_core; inside kitchen, apps -> families -> engine. And there is no
import cycle anywhere, imports inside functions and under `TYPE_CHECKING` included.

Check by hand: `python -m pytest tests/architecture/test_layers.py -q`."""

from __future__ import annotations

import pytest

from kitchen import layers
from tests.architecture.import_graph import ROOT, cycles, edges, modules, top_level_packages, within


def crossings(allowed_by_package: dict[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    problems = []
    for module, targets in edges().items():
        top = module.split(".")[0]
        if top not in allowed_by_package:
            continue
        for target in targets:
            if target.split(".")[0] == top:
                continue
            if not any(within(target, allowed) for allowed in allowed_by_package[top]):
                problems.append((module, target))
    return sorted(problems)


def test_every_top_level_package_has_a_declared_layer() -> None:
    assert sorted(layers.REPOSITORY) == top_level_packages()


def test_top_level_packages_import_only_what_their_layer_allows() -> None:
    assert crossings(layers.REPOSITORY) == []


def test_adapters_import_no_other_adapter() -> None:
    problems = []
    for module, targets in edges().items():
        parts = module.split(".")
        if parts[0] != "adapters" or len(parts) < 2:
            continue
        for target in targets:
            other = target.split(".")
            if other[0] == "adapters" and len(other) > 1 and other[1] not in {parts[1], "common"}:
                problems.append((module, target))
    assert problems == []


def test_inside_kitchen_nothing_lower_imports_higher() -> None:
    upward = []
    for module, targets in edges().items():
        own = layers.kitchen_layer(module)
        for target in targets:
            theirs = layers.kitchen_layer(target)
            if own is not None and theirs is not None and theirs > own:
                upward.append((module, target))
    assert upward == []


def test_every_kitchen_package_sits_in_a_layer() -> None:
    loose = {name for name in modules() if name.count(".") == 1 and name.startswith("kitchen.")}
    packages = {name for name, module in modules().items() if module.is_package and name.count(".") == 1}
    assert {p for p in packages if p.startswith("kitchen.") and layers.kitchen_layer(p) is None} == set()
    assert len(loose - packages) <= layers.LOOSE_MODULES_MAX, sorted(loose - packages)


def test_no_import_cycle() -> None:
    assert cycles() == []


def test_the_graph_sees_real_imports() -> None:
    """Guards the guard: lazy and TYPE_CHECKING imports are edges, and a cycle would be found."""
    graph = edges()
    assert "kitchen.engine.context" in graph["kitchen.engine.workflow"]  # under TYPE_CHECKING there
    assert "kitchen.engine.plugins" in graph["kitchen.engine.recipe"]
    assert any(within(target, "adapters.common") for target in graph["adapters.local.sampler"])
    assert modules()["kitchen.engine.stage"].path == (ROOT / "kitchen" / "engine" / "stage.py")


def test_a_cycle_would_be_found(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.architecture import import_graph

    graph = dict(edges())
    graph["kitchen.engine.errors"] = graph["kitchen.engine.errors"] | {"kitchen.engine.stage"}
    monkeypatch.setattr(import_graph, "edges", lambda: graph)
    assert any("kitchen.engine.errors" in group for group in import_graph.cycles())
