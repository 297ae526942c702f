"""Where task and grader names come from: kitchen's own tasks (supervised NLL, preference
accuracy, a user's JSONL with a grader), the built-in graders, and those other packages register
through entry points (`kitchen.eval_tasks`, `kitchen.graders` in their `pyproject.toml`) or by
calling `register_task` / `register_grader`. The shipped recipes register their RL sets this way
(arithmetic, GSM8K, code), so kitchen names no recipe.
"""

from __future__ import annotations

import difflib
from functools import cache
from importlib.metadata import entry_points

from kitchen.errors import ConfigError
from kitchen.eval.graders import BUILTIN_GRADERS, GraderFn
from kitchen.eval.task import EvalTask

TASKS_GROUP = "kitchen.eval_tasks"
GRADERS_GROUP = "kitchen.graders"

_TASKS: dict[str, EvalTask] = {}
_GRADERS: dict[str, GraderFn] = {}


def register_task(task: EvalTask) -> None:
    _TASKS[task.name] = task


def register_grader(name: str, fn: GraderFn) -> None:
    _GRADERS[name] = fn


@cache
def _discovered_tasks() -> dict[str, EvalTask]:
    from kitchen.eval.builtin_tasks import BUILTIN_TASKS
    from kitchen.recipe import own_recipes_package

    own_recipes_package()  # the shipped tasks come from kitchen's own recipes, never a cwd namesake
    found = {task.name: task for task in BUILTIN_TASKS}
    for entry in entry_points(group=TASKS_GROUP):
        task = entry.load()
        if not isinstance(task, EvalTask) or task.name != entry.name:
            raise TypeError(f"entry point {entry.value!r} ({TASKS_GROUP}) is not an EvalTask named {entry.name!r}")
        found[entry.name] = task
    return found


@cache
def _discovered_graders() -> dict[str, GraderFn]:
    found = dict(BUILTIN_GRADERS)
    for entry in entry_points(group=GRADERS_GROUP):
        fn = entry.load()
        if not callable(fn):
            raise TypeError(f"entry point {entry.value!r} ({GRADERS_GROUP}) is not callable")
        found[entry.name] = fn
    return found


def eval_tasks() -> dict[str, EvalTask]:
    """Every task by name (kitchen's, entry points, then `register_task` calls)."""
    return {**_discovered_tasks(), **_TASKS}


def graders() -> dict[str, GraderFn]:
    """Every named grader (built in, entry points, then `register_grader` calls)."""
    return {**_discovered_graders(), **_GRADERS}


def get_task(name: str) -> EvalTask:
    tasks = eval_tasks()
    if name not in tasks:
        close = difflib.get_close_matches(name, tasks, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"unknown task {name!r}; {hint}tasks: {', '.join(sorted(tasks))}")
    return tasks[name]
