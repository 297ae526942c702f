"""How many files a reader opens to follow one synchronous RL step, measured by tracing one.

    PYTHONPATH=. python benchmarks/step_locality.py [--recipe math_rl] [--backend local] [--list]
    PYTHONPATH=. python benchmarks/step_locality.py --all

Runs the recipe (sync mode, no warm start) and traces step 1 (the second step: setup is over);
`--all` does it for one recipe of each family (RL, supervised, preference, distillation). Every
top-level package of the repository counts (`kitchen.layers.REPOSITORY`: moving code into a new
one cannot hide it). Three figures, each as files and their total lines:

- reading path: the recipe's module, the workflow builder's module, the modules of the step's
  stages, and the modules of every function those stages' `run` bodies call directly (on the
  local backend that includes the backend's methods behind the ports) — what a reader opens to
  follow the step top to bottom, less the framework a reader learns once (the stage, context,
  workflow and runner modules). Goal for math_rl on the local backend: <= 8 files.
- executed: every repository file with code that ran during the step (runner, context and
  metrics bookkeeping included).
- beyond sl_basic: the executed files of this recipe's step that an sl_basic step on the same
  backend does not run — what RL adds to the machinery of a supervised step. Goal for math_rl:
  <= 18 files (on noop, where the issue measured 27).

Calls are traced with `sys.setprofile` on the event loop's thread (as the issue that set the goals
measured them): work a backend hands to its own threads (the local backend's sampler and training
passes run on worker threads) is not counted, for either recipe.

Measured on 2 CPU cores (2026-11-27), math_rl on noop / local: reading path 9 / 9 files,
executed 40 / 38, beyond sl_basic 18 / 19 (before the structure work, by this script: 12 / 12,
50 / 48, 27 / 28).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from kitchen.engine.config.loading import load_config
from kitchen.engine.hooks import Hooks
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.workflow import Workflow
from kitchen.layers import REPOSITORY

ROOT = Path(__file__).resolve().parents[1]
LAYERS = tuple(REPOSITORY)
FRAMEWORK = {
    "kitchen/engine/stage.py",
    "kitchen/engine/context.py",
    "kitchen/engine/workflow.py",
    "kitchen/engine/runner.py",
}


def in_repo(filename: str) -> str | None:
    """The file's path relative to the repository when it is kitchen's own code, else None."""
    path = Path(filename)
    if not path.is_absolute():
        return None
    try:
        relative = path.resolve().relative_to(ROOT)
    except ValueError:
        return None
    return str(relative) if relative.parts[0] in LAYERS else None


class StepTracer(Hooks):
    """Traces Python calls during one step of the step loop."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.tracing = False
        self.executed: set[str] = set()
        self.stage_modules: set[str] = set()
        self.direct: set[str] = set()
        self._run_codes: set[types.CodeType] = set()

    def _profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = in_repo(frame.f_code.co_filename)
        if callee is None:
            return
        self.executed.add(callee)
        caller = frame.f_back
        if caller is not None and caller.f_code in self._run_codes:
            self.direct.add(callee)

    def before_stage(self, ctx: Any, stage: Any) -> None:
        if ctx.step != self.step:
            return
        run = type(stage).run
        self._run_codes.add(run.__code__)
        module = in_repo(run.__code__.co_filename)
        if module:
            self.stage_modules.add(module)
        if not self.tracing:
            self.tracing = True
            sys.setprofile(self._profile)

    def on_step_end(self, ctx: Any, step: int) -> None:
        if step == self.step and self.tracing:
            sys.setprofile(None)
            self.tracing = False


def workflow_modules(recipe: Any, config: Any) -> set[str]:
    """The modules whose code constructs the recipe's `Workflow` (its family's workflow module)."""
    found: set[str] = set()
    init = Workflow.__init__.__code__

    def profile(frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is init and frame.f_back is not None:
            module = in_repo(frame.f_back.f_code.co_filename)
            if module:
                found.add(module)

    sys.setprofile(profile)
    try:
        recipe.workflow(config)
    finally:
        sys.setprofile(None)
    return found


def lines(files: set[str]) -> int:
    return sum(len((ROOT / file).read_text(encoding="utf-8").splitlines()) for file in files)


RL_OVERRIDES = ["warm_start.steps=0", "rl.num_batches=3", "rl.groups_per_batch=4", "rl.group_size=4"]
SHORT_OVERRIDES = ["data.max_steps=3"]
FAMILIES = {
    "math_rl": RL_OVERRIDES,
    "sl_basic": SHORT_OVERRIDES,
    "dpo": SHORT_OVERRIDES,
    "distill_on_policy": [*RL_OVERRIDES, "datasets=[{name: arithmetic, prompts: arithmetic}]"],
    "distill_prompt": [*SHORT_OVERRIDES, "teacher.model.checkpoint=null", "data.batch_size=8"],
}
"""One recipe per family, with the overrides that make its step loop short (and runnable on noop)."""


def trace(name: str, backend: str) -> tuple[set[str], StepTracer]:
    """The reading path and the tracer of step 1 of recipe `name` on `backend`."""
    recipe = get_recipe(name)
    tracer = StepTracer(step=1)
    with tempfile.TemporaryDirectory() as scratch:
        overrides = [f"backend={backend}", f"log_path={scratch}/run", "eval.every=0", "checkpoint.save_every=0"]
        config = load_config(recipe.config_cls, None, [*overrides, *FAMILIES.get(name, RL_OVERRIDES)])
        run_recipe(recipe, config, hooks=[tracer], progress=False)
    recipe_module = in_repo(sys.modules[type(config).__module__].__file__ or "")
    found = {*tracer.stage_modules, *tracer.direct, *workflow_modules(recipe, config)}
    return ({recipe_module} if recipe_module else set()) | found - FRAMEWORK, tracer


def figure(files: set[str]) -> str:
    return f"{len(files)} files, {lines(files)} lines"


def measure(name: str, backend: str, show: bool) -> None:
    reading, tracer = trace(name, backend)
    print(f"recipe {name}, step 1 on the {backend} backend")
    print(f"  reading path: {figure(reading)}")
    print(f"  executed:     {figure(tracer.executed)}")
    beyond: set[str] = set()
    if name != "sl_basic":
        beyond = tracer.executed - trace("sl_basic", backend)[1].executed
        print(f"  beyond sl_basic: {figure(beyond)}")
    if show:
        for title, files in (("reading path", reading), ("executed", tracer.executed), ("beyond sl_basic", beyond)):
            if files:
                print(f"  {title}:\n    " + "\n    ".join(f"{f} ({lines({f})})" for f in sorted(files)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="math_rl")
    parser.add_argument("--backend", default="local", choices=["local", "noop"])
    parser.add_argument("--all", action="store_true", help="one recipe of each family")
    parser.add_argument("--list", action="store_true", help="print the files of each figure")
    args = parser.parse_args()
    for name in FAMILIES if args.all else [args.recipe]:
        measure(name, args.backend, args.list)


if __name__ == "__main__":
    main()
