"""kitchen: LLM post-training as declarative workflows of typed stages.

The public surface, importable from `kitchen` itself; everything else is internal and may change
between minor versions (see CHANGELOG.md). Names load on first use, so `import kitchen` stays
cheap and a backend adapter importing `kitchen.ports` does not pull in the whole engine.

    from kitchen import Stage, Workflow, Loop, Context, run_recipe, load_config

- Composing: `Stage`, `Persisted`, `Live`, `Workflow`, `Loop`, `When`, `Parallel`, `every`,
  `ConfigPredicate`, `WorkflowBuilder`, `render_tree`.
- Running: `Context`, `Runner`, `run_stage`, `Hooks`, `StageFailure`, `run_recipe`, `RunDir`,
  `read_metrics`, `validate_recipe`.
- Recipes and settings: `Recipe`, `get_recipe`, `recipe_names`, `load_config`, `defaults`,
  `RunConfig`, `Count`, `Rate`, `NonNegative`, `OptimizerSettings`, `RendererSettings`,
  `DatasetSettings`, `OtherModel`, `SupervisedSettings`, `ChatSupervisedSettings`,
  `PreferenceSettings`, `RLSettings`.
- Backends: the ports `ServiceBackend`, `TrainingClient`, `SamplingClient`, `Tokenizer`; the
  registry `BackendSpec`, `register_backend`, `backend_specs`, `get_backend_spec`.
- Errors: `KitchenError`, `ConfigError`, `DataError`, `WiringError`, `StageError`.
- Testing: the `kitchen.testing` module (a pytest plugin, loaded automatically).
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kitchen.backends import BackendSpec, backend_specs, get_backend_spec, register_backend
    from kitchen.config import Count, NonNegative, Rate, RunConfig, defaults, load_config
    from kitchen.context import Context
    from kitchen.errors import ConfigError, DataError, KitchenError, StageError, WiringError
    from kitchen.hooks import Hooks
    from kitchen.launch import RunDir, run_recipe
    from kitchen.metrics import read_metrics
    from kitchen.ports import SamplingClient, ServiceBackend, Tokenizer, TrainingClient
    from kitchen.preference.settings import PreferenceSettings
    from kitchen.recipe import Recipe, get_recipe, recipe_names
    from kitchen.rl.settings import RLSettings
    from kitchen.runner import Runner, StageFailure, run_stage
    from kitchen.settings import DatasetSettings, OptimizerSettings, OtherModel, RendererSettings
    from kitchen.stage import Live, Persisted, Stage
    from kitchen.supervised.settings import ChatSupervisedSettings, SupervisedSettings
    from kitchen.validation import validate_recipe
    from kitchen.workflow import ConfigPredicate, Loop, Parallel, When, Workflow, WorkflowBuilder, every, render_tree

_EXPORTS: dict[str, str] = {
    "Stage": "kitchen.stage",
    "Persisted": "kitchen.stage",
    "Live": "kitchen.stage",
    "Workflow": "kitchen.workflow",
    "Loop": "kitchen.workflow",
    "When": "kitchen.workflow",
    "Parallel": "kitchen.workflow",
    "every": "kitchen.workflow",
    "ConfigPredicate": "kitchen.workflow",
    "WorkflowBuilder": "kitchen.workflow",
    "render_tree": "kitchen.workflow",
    "Context": "kitchen.context",
    "Runner": "kitchen.runner",
    "run_stage": "kitchen.runner",
    "StageFailure": "kitchen.runner",
    "Hooks": "kitchen.hooks",
    "run_recipe": "kitchen.launch",
    "RunDir": "kitchen.launch",
    "read_metrics": "kitchen.metrics",
    "validate_recipe": "kitchen.validation",
    "Recipe": "kitchen.recipe",
    "get_recipe": "kitchen.recipe",
    "recipe_names": "kitchen.recipe",
    "load_config": "kitchen.config",
    "defaults": "kitchen.config",
    "RunConfig": "kitchen.config",
    "Count": "kitchen.config",
    "Rate": "kitchen.config",
    "NonNegative": "kitchen.config",
    "OptimizerSettings": "kitchen.settings",
    "RendererSettings": "kitchen.settings",
    "DatasetSettings": "kitchen.settings",
    "OtherModel": "kitchen.settings",
    "SupervisedSettings": "kitchen.supervised.settings",
    "ChatSupervisedSettings": "kitchen.supervised.settings",
    "PreferenceSettings": "kitchen.preference.settings",
    "RLSettings": "kitchen.rl.settings",
    "ServiceBackend": "kitchen.ports",
    "TrainingClient": "kitchen.ports",
    "SamplingClient": "kitchen.ports",
    "Tokenizer": "kitchen.ports",
    "BackendSpec": "kitchen.backends",
    "register_backend": "kitchen.backends",
    "backend_specs": "kitchen.backends",
    "get_backend_spec": "kitchen.backends",
    "KitchenError": "kitchen.errors",
    "ConfigError": "kitchen.errors",
    "DataError": "kitchen.errors",
    "WiringError": "kitchen.errors",
    "StageError": "kitchen.errors",
}

__all__ = [
    "BackendSpec",
    "ChatSupervisedSettings",
    "ConfigError",
    "ConfigPredicate",
    "Context",
    "Count",
    "DataError",
    "DatasetSettings",
    "Hooks",
    "KitchenError",
    "Live",
    "Loop",
    "NonNegative",
    "OptimizerSettings",
    "OtherModel",
    "Parallel",
    "Persisted",
    "PreferenceSettings",
    "RLSettings",
    "Rate",
    "Recipe",
    "RendererSettings",
    "RunConfig",
    "RunDir",
    "Runner",
    "SamplingClient",
    "ServiceBackend",
    "Stage",
    "StageError",
    "StageFailure",
    "SupervisedSettings",
    "Tokenizer",
    "TrainingClient",
    "When",
    "WiringError",
    "Workflow",
    "WorkflowBuilder",
    "__version__",
    "backend_specs",
    "defaults",
    "every",
    "get_backend_spec",
    "get_recipe",
    "load_config",
    "read_metrics",
    "recipe_names",
    "register_backend",
    "render_tree",
    "run_recipe",
    "run_stage",
    "validate_recipe",
]

try:
    __version__ = version("kitchen")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kitchen' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
