"""Module paths of kitchen 0.2 and where they moved in 0.3 (one engine, training families, apps):
an import of an old path still works for this release, with a DeprecationWarning naming the new
one (docs/how-to/migrate.md lists the same table). The old name is an alias of the new module,
never a second copy of it."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

MOVED: dict[str, str] = {
    "kitchen.errors": "kitchen.engine.errors",
    "kitchen.ports": "kitchen.engine.ports",
    "kitchen.typecompat": "kitchen.engine.typecompat",
    "kitchen.stage": "kitchen.engine.stage",
    "kitchen.workflow": "kitchen.engine.workflow",
    "kitchen.runner": "kitchen.engine.runner",
    "kitchen.context": "kitchen.engine.context",
    "kitchen.hooks": "kitchen.engine.hooks",
    "kitchen.recipe": "kitchen.engine.recipe",
    "kitchen.validation": "kitchen.engine.validation",
    "kitchen.launch": "kitchen.engine.launch",
    "kitchen.subruns": "kitchen.engine.subruns",
    "kitchen.plugins": "kitchen.engine.plugins",
    "kitchen.backends": "kitchen.engine.backends",
    "kitchen.callables": "kitchen.engine.callables",
    "kitchen.losses": "kitchen.engine.losses",
    "kitchen.renderers": "kitchen.engine.renderers",
    "kitchen.rewards": "kitchen.engine.rewards",
    "kitchen.secrets": "kitchen.engine.secrets",
    "kitchen.eval.task": "kitchen.engine.eval_tasks",
    "kitchen.eval.registry": "kitchen.engine.eval_tasks",
    "kitchen.config": "kitchen.engine.config.loading",
    "kitchen.eval.schedule": "kitchen.engine.config.eval_schedule",
    "kitchen.yaml_bounded": "kitchen.engine.config.yaml_bounded",
    "kitchen.rundir": "kitchen.engine.runs.rundir",
    "kitchen.checkpoints": "kitchen.engine.runs.checkpoints",
    "kitchen.best_checkpoint": "kitchen.engine.runs.best_checkpoint",
    "kitchen.metrics": "kitchen.engine.runs.metrics",
    "kitchen.datasets": "kitchen.engine.runs.datasets",
    "kitchen.record_cache": "kitchen.engine.runs.record_cache",
    "kitchen.logging": "kitchen.engine.observe.logging",
    "kitchen.observe": "kitchen.engine.observe.traces",
    "kitchen.sinks": "kitchen.engine.observe.sinks",
    "kitchen.settings": "kitchen.families.common.settings",
    "kitchen.stages.setup": "kitchen.families.common.setup",
    "kitchen.stages.training": "kitchen.families.common.training",
    "kitchen.stages.checkpoint": "kitchen.families.common.checkpoint",
    "kitchen.stages.train_loop": "kitchen.families.common.train_loop",
    "kitchen.stages": "kitchen.families.common",
    "kitchen.requests": "kitchen.families.common.requests",
    "kitchen.completers": "kitchen.families.common.completers",
    "kitchen.eval.training": "kitchen.families.evaluation.during_training",
    "kitchen.eval.graders": "kitchen.families.evaluation.graders",
    "kitchen.eval.generation": "kitchen.families.evaluation.generation",
    "kitchen.eval.builtin_tasks": "kitchen.families.evaluation.builtin_tasks",
    "kitchen.eval.results": "kitchen.families.evaluation.results",
    "kitchen.eval.target": "kitchen.families.evaluation.target",
    "kitchen.supervised": "kitchen.families.supervised",
    "kitchen.preference": "kitchen.families.preference",
    "kitchen.rl": "kitchen.families.rl",
    "kitchen.distillation": "kitchen.families.distillation",
    "kitchen.cli": "kitchen.apps.cli",
    "kitchen.cli_tools": "kitchen.apps.cli_tools",
    "kitchen.inference": "kitchen.apps.inference",
    "kitchen.eval.command": "kitchen.apps.eval.command",
    "kitchen.eval.harness": "kitchen.apps.eval.harness",
    "kitchen.eval.lm_eval_model": "kitchen.apps.eval.lm_eval_model",
    "kitchen.eval": "kitchen.apps.eval",
    "kitchen.serve": "kitchen.apps.serve",
    "kitchen.report": "kitchen.apps.report",
    "kitchen.agents": "kitchen.integrations.agents",
    "kitchen.hubs": "kitchen.integrations.hubs",
    "kitchen.tools": "kitchen.integrations.tools",
    "kitchen.sandbox": "sandbox",
}
"""Old module or package -> its new path; a module under an old package moved with it."""


def new_name(old: str) -> str | None:
    """Where the module `old` lives now (None: it did not move)."""
    for prefix in sorted(MOVED, key=len, reverse=True):
        if old == prefix or old.startswith(prefix + "."):
            return MOVED[prefix] + old[len(prefix) :]
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, module: ModuleType) -> None:
        self.module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        """The module ran under its new name already."""


class MovedModules(importlib.abc.MetaPathFinder):
    """Answers imports of old module paths with the module at the new path."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        target_name = new_name(fullname) if fullname.startswith("kitchen.") else None
        if target_name is None:
            return None
        warnings.warn(
            f"{fullname} moved to {target_name} in kitchen 0.3; the old path works until 0.4 (docs/how-to/migrate.md)",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(target_name)
        return importlib.machinery.ModuleSpec(fullname, _Alias(module), is_package=hasattr(module, "__path__"))


def install() -> None:
    """Put the finder first, once, so an old path never loads a second copy of a module."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
