"""Recipe: a config class plus the workflow and initial state it selects. Recipes stay thin."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitchen.config import RunConfig
from kitchen.errors import ConfigError
from kitchen.workflow import Workflow


def no_initial_state(config: Any) -> dict[str, Any]:
    """Most recipes start from an empty run state: their first stages write what later ones read."""
    return {}


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    config_cls: type[RunConfig]
    workflow: Callable[[Any], Workflow]
    initial_state: Callable[[Any], dict[str, Any]] = no_initial_state


OWN_RECIPES = Path(__file__).resolve().parents[1] / "recipes"
"""The recipes shipped beside this kitchen package (installed or in a checkout)."""


def _recipes_package() -> Any:
    """kitchen's own `recipes` package, never one that happens to sit in the current directory
    (`python -m kitchen` puts the cwd first on sys.path): a foreign one is not imported."""
    loaded = sys.modules.get("recipes")
    if loaded is not None:
        where = Path(getattr(loaded, "__file__", "") or "").resolve().parent
        if where != OWN_RECIPES:
            raise ConfigError(
                f"the 'recipes' package already imported is {where}, not kitchen's own ({OWN_RECIPES}); "
                "run kitchen from another directory"
            )
        return loaded
    spec = importlib.util.find_spec("recipes")
    if spec is not None and spec.origin and Path(spec.origin).resolve().parent == OWN_RECIPES:
        return importlib.import_module("recipes")
    init = OWN_RECIPES / "__init__.py"
    if not init.is_file():
        raise ConfigError(f"kitchen's recipes package is missing: {init}")
    own = importlib.util.spec_from_file_location("recipes", init, submodule_search_locations=[str(OWN_RECIPES)])
    assert own is not None and own.loader is not None
    module = importlib.util.module_from_spec(own)
    sys.modules["recipes"] = module
    try:
        own.loader.exec_module(module)
    except BaseException:
        del sys.modules["recipes"]
        raise
    return module


def recipe_names() -> list[str]:
    package = _recipes_package()
    names = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"recipes.{info.name}")
        if isinstance(getattr(module, "RECIPE", None), Recipe):
            names.append(info.name)
    return sorted(names)


def get_recipe(name: str) -> Recipe:
    names = recipe_names()
    if name not in names:
        raise ConfigError(f"unknown recipe {name!r}; available: {', '.join(names)}")
    recipe = importlib.import_module(f"recipes.{name}").RECIPE
    assert isinstance(recipe, Recipe)
    return recipe


def configs_dir() -> Path:
    return Path(_recipes_package().__path__[0]) / "configs"


def shipped_configs(name: str) -> list[Path]:
    """YAML configs shipped for a recipe: `configs/<name>.yaml` and `configs/<name>_*.yaml`."""
    folder = configs_dir()
    return sorted([*folder.glob(f"{name}.yaml"), *folder.glob(f"{name}_*.yaml")])
