"""Recipes stay thin and on the public API, and a recipe's config stays in sections: the ceilings
`kitchen.layers` declares (`PUBLIC_MODULES`, `RECIPE_IMPORTS_MAX`, `TOP_LEVEL_KEYS_MAX`)."""

from __future__ import annotations

import ast
import importlib

from kitchen import layers
from kitchen.engine.config.sections import Section, model_of
from kitchen.engine.recipe import get_recipe, recipe_names
from tests.architecture.import_graph import ROOT, within


def kitchen_imports() -> dict[str, set[str]]:
    """kitchen module named in an import -> the recipes and examples (`examples/*.py`, the docs'
    own) that name it (`from kitchen.families.rl import X` names `kitchen.families.rl`)."""
    found: dict[str, set[str]] = {}
    for path in sorted([*(ROOT / "recipes").rglob("*.py"), *(ROOT / "examples").glob("*.py")]):
        importer = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            for name in names:
                if within(name, "kitchen"):
                    found.setdefault(name, set()).add(importer)
    return found


def test_recipes_and_examples_import_only_kitchens_public_modules() -> None:
    used = kitchen_imports()
    assert "examples.custom_workflow" in {user for users in used.values() for user in users}
    private = {module: sorted(users) for module, users in used.items() if module not in layers.PUBLIC_MODULES}
    assert private == {}, "import these names from kitchen or a family's public module"
    assert len(used) <= layers.RECIPE_IMPORTS_MAX, sorted(used)


def test_every_public_module_exports_names() -> None:
    for name in layers.PUBLIC_MODULES:
        module = importlib.import_module(name)
        exported = [attr for attr in dir(module) if not attr.startswith("_")]
        assert exported, name


def test_every_recipe_has_at_most_the_top_level_keys_allowed() -> None:
    counts = {name: len(get_recipe(name).config_cls.model_fields) for name in recipe_names()}
    assert {name: n for name, n in counts.items() if n > layers.TOP_LEVEL_KEYS_MAX} == {}


def test_a_recipes_sections_are_sections() -> None:
    """A nested settings model at the top of a recipe's config is a `Section` (so its 0.2 names are
    renamed and its place is found by type), or a backend's own section."""
    from kitchen.engine.backends import backend_specs

    backends = set(backend_specs())
    for name in recipe_names():
        for key, field in get_recipe(name).config_cls.model_fields.items():
            model = model_of(field.annotation)
            if model is not None and key not in backends:
                assert issubclass(model, Section) or key == "env", (name, key, model)
