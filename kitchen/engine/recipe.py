"""Recipe: a config class plus the workflow and initial state it selects. Recipes stay thin."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitchen.engine.config.run import RunConfig
from kitchen.engine.errors import ConfigError
from kitchen.engine.plugins import ExtensionPoint, own_recipes_package
from kitchen.engine.workflow import Workflow


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


def _check_recipe(name: str, obj: Any) -> Recipe:
    if not isinstance(obj, Recipe):
        raise TypeError(f"is not a kitchen.engine.recipe.Recipe (got {type(obj).__name__})")
    if obj.name != name:
        raise TypeError(f"its Recipe is named {obj.name!r}; the entry point's name must match")
    return obj


RECIPES: ExtensionPoint[Recipe] = ExtensionPoint("kitchen.recipes", "recipe", _check_recipe)
"""Every recipe `kitchen run NAME` knows: kitchen's own and installed packages', by entry point."""


def recipe_names() -> list[str]:
    own_recipes_package()  # kitchen's own `recipes`, never a folder of that name in the cwd
    return RECIPES.names()


def load_recipe_file(path: Path) -> Recipe:
    """A user's recipe module: a Python file that defines `RECIPE` (its folder goes on sys.path,
    so it may import modules beside it)."""
    if not path.is_file():
        raise ConfigError(f"recipe file not found: {path}")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module_name = f"kitchen_user_recipe_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    recipe = getattr(module, "RECIPE", None)
    if not isinstance(recipe, Recipe):
        raise ConfigError(f"{path}: defines no RECIPE (a kitchen.engine.recipe.Recipe)")
    return recipe


def get_recipe(name: str) -> Recipe:
    if name.endswith(".py") or "/" in name or "\\" in name:
        return load_recipe_file(Path(name))
    own_recipes_package()
    return RECIPES.get(name)


def configs_dir() -> Path:
    return Path(own_recipes_package().__path__[0]) / "configs"


def shipped_configs(name: str) -> list[Path]:
    """YAML configs shipped for a recipe: `configs/<name>.yaml` and `configs/<name>_*.yaml`."""
    folder = configs_dir()
    return sorted([*folder.glob(f"{name}.yaml"), *folder.glob(f"{name}_*.yaml")])


def resolve_config_path(value: str | Path) -> Path:
    """`--config`: a YAML file (relative to the working directory), or a shipped config by name
    (`dpo` or `dpo.yaml` -> the `configs/dpo.yaml` shipped with the recipes)."""
    path = Path(value)
    if path.is_file():
        return path
    if path.is_dir():
        raise ConfigError(f"config file {value} is a directory, not a YAML file")
    name = str(value)
    if "/" not in name and "\\" not in name:
        shipped = configs_dir() / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
        if shipped.is_file():
            return shipped
    names = ", ".join(sorted(p.stem for p in configs_dir().glob("*.yaml")))
    raise ConfigError(f"config file not found: {value} (nor a shipped config; shipped: {names})")
