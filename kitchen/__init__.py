"""kitchen: LLM post-training as declarative workflows of typed stages.

The public surface, importable from `kitchen` itself; everything else is internal and may change
between minor versions (see CHANGELOG.md). Names load on first use, so `import kitchen` stays
cheap and a backend adapter importing `kitchen.engine.ports` does not pull in the whole engine.

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

from kitchen import moved

moved.install()

if TYPE_CHECKING:
    from kitchen.engine.backends import BackendSpec, backend_specs, get_backend_spec, register_backend
    from kitchen.engine.config.loading import Count, NonNegative, Rate, RunConfig, defaults, load_config
    from kitchen.engine.context import Context
    from kitchen.engine.errors import ConfigError, DataError, KitchenError, StageError, WiringError
    from kitchen.engine.hooks import Hooks
    from kitchen.engine.launch import RunDir, run_recipe
    from kitchen.engine.ports import SamplingClient, ServiceBackend, Tokenizer, TrainingClient
    from kitchen.engine.recipe import Recipe, get_recipe, recipe_names
    from kitchen.engine.runner import Runner, StageFailure, run_stage
    from kitchen.engine.runs.metrics import read_metrics
    from kitchen.engine.stage import Live, Persisted, Stage
    from kitchen.engine.validation import validate_recipe
    from kitchen.engine.workflow import (
        ConfigPredicate,
        Loop,
        Parallel,
        When,
        Workflow,
        WorkflowBuilder,
        every,
        render_tree,
    )
    from kitchen.families.common.settings import DatasetSettings, OptimizerSettings, OtherModel, RendererSettings
    from kitchen.families.preference.settings import PreferenceSettings
    from kitchen.families.rl.settings import RLSettings
    from kitchen.families.supervised.settings import ChatSupervisedSettings, SupervisedSettings

_EXPORTS: dict[str, str] = {
    "Stage": "kitchen.engine.stage",
    "Persisted": "kitchen.engine.stage",
    "Live": "kitchen.engine.stage",
    "Workflow": "kitchen.engine.workflow",
    "Loop": "kitchen.engine.workflow",
    "When": "kitchen.engine.workflow",
    "Parallel": "kitchen.engine.workflow",
    "every": "kitchen.engine.workflow",
    "ConfigPredicate": "kitchen.engine.workflow",
    "WorkflowBuilder": "kitchen.engine.workflow",
    "render_tree": "kitchen.engine.workflow",
    "Context": "kitchen.engine.context",
    "Runner": "kitchen.engine.runner",
    "run_stage": "kitchen.engine.runner",
    "StageFailure": "kitchen.engine.runner",
    "Hooks": "kitchen.engine.hooks",
    "run_recipe": "kitchen.engine.launch",
    "RunDir": "kitchen.engine.launch",
    "read_metrics": "kitchen.engine.runs.metrics",
    "validate_recipe": "kitchen.engine.validation",
    "Recipe": "kitchen.engine.recipe",
    "get_recipe": "kitchen.engine.recipe",
    "recipe_names": "kitchen.engine.recipe",
    "load_config": "kitchen.engine.config.loading",
    "defaults": "kitchen.engine.config.loading",
    "RunConfig": "kitchen.engine.config.loading",
    "Count": "kitchen.engine.config.loading",
    "Rate": "kitchen.engine.config.loading",
    "NonNegative": "kitchen.engine.config.loading",
    "OptimizerSettings": "kitchen.families.common.settings",
    "RendererSettings": "kitchen.families.common.settings",
    "DatasetSettings": "kitchen.families.common.settings",
    "OtherModel": "kitchen.families.common.settings",
    "SupervisedSettings": "kitchen.families.supervised.settings",
    "ChatSupervisedSettings": "kitchen.families.supervised.settings",
    "PreferenceSettings": "kitchen.families.preference.settings",
    "RLSettings": "kitchen.families.rl.settings",
    "ServiceBackend": "kitchen.engine.ports",
    "TrainingClient": "kitchen.engine.ports",
    "SamplingClient": "kitchen.engine.ports",
    "Tokenizer": "kitchen.engine.ports",
    "BackendSpec": "kitchen.engine.backends",
    "register_backend": "kitchen.engine.backends",
    "backend_specs": "kitchen.engine.backends",
    "get_backend_spec": "kitchen.engine.backends",
    "KitchenError": "kitchen.engine.errors",
    "ConfigError": "kitchen.engine.errors",
    "DataError": "kitchen.engine.errors",
    "WiringError": "kitchen.engine.errors",
    "StageError": "kitchen.engine.errors",
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
