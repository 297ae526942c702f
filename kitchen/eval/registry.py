"""Where task and grader names come from: the `kitchen.eval_tasks` and `kitchen.graders`
entry-point groups (`kitchen.plugins`). kitchen's own tasks (supervised NLL, preference accuracy,
a user's JSONL with a grader) and graders (math, exact) are declared there like any package's;
the shipped recipes add their RL sets (arithmetic, GSM8K, code) the same way, so kitchen names
no recipe.
"""

from __future__ import annotations

from typing import Any

from kitchen.eval.graders import GraderFn
from kitchen.eval.task import EvalTask
from kitchen.plugins import ExtensionPoint
from kitchen.recipe import own_recipes_package


def _task(name: str, obj: Any) -> EvalTask:
    if not isinstance(obj, EvalTask) or obj.name != name:
        raise TypeError(f"is not an EvalTask named {name!r}")
    return obj


def _grader(name: str, obj: Any) -> GraderFn:
    if not callable(obj):
        raise TypeError("is not a grader (a callable of prompt, response, record)")
    grader: GraderFn = obj
    return grader


TASKS: ExtensionPoint[EvalTask] = ExtensionPoint("kitchen.eval_tasks", "task", _task)
GRADERS: ExtensionPoint[GraderFn] = ExtensionPoint("kitchen.graders", "grader", _grader)


def eval_tasks() -> dict[str, EvalTask]:
    """Every task by name."""
    own_recipes_package()  # the shipped tasks come from kitchen's own recipes, never a cwd namesake
    return TASKS.load()


def graders() -> dict[str, GraderFn]:
    """Every named grader."""
    return GRADERS.load()


def get_task(name: str) -> EvalTask:
    """The task called `name`; an unknown one is a ConfigError with a "did you mean"."""
    own_recipes_package()
    return TASKS.get(name)
