"""Testing kitchen workflows and backends with pytest. The plugin (`kitchen.testing.plugin`) loads
by itself wherever kitchen is installed; it gives:

- the `kitchen_run` fixture: run a recipe, or a workflow you built, on the noop backend in a
  temporary run directory, with config overrides and a scripted fake model, and read back what it
  wrote (`RunResult`):

      def test_my_filter_drops_long_examples(kitchen_run):
          run = kitchen_run(build_workflow, "data.max_steps=3", config=Config)
          assert sum(run.column("filter/dropped")) > 0

- `--kitchen-backend=NAME`: kitchen's backend contract suite against a registered backend
  (`pytest --pyargs kitchen.testing.contract --kitchen-backend=NAME`; see
  `kitchen.testing.contract`).

`run_on_noop` is the same as the fixture, for use outside pytest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitchen.engine.backends import make_backend
from kitchen.engine.config.loading import load_config
from kitchen.engine.config.run import RunConfig
from kitchen.engine.hooks import Hooks
from kitchen.engine.launch import run_recipe
from kitchen.engine.ports import ServiceBackend
from kitchen.engine.recipe import Recipe, get_recipe
from kitchen.engine.runs.checkpoints import CheckpointRecord, read_records
from kitchen.engine.runs.metrics import read_metrics
from kitchen.engine.workflow import Workflow

Target = str | Recipe | Workflow | Callable[[Any], Workflow]
"""A recipe name or file, a `Recipe`, a `Workflow`, or a function of the config that builds one."""


@dataclass(frozen=True)
class RunResult:
    """What a test run wrote: its directory, metrics rows, checkpoint records and events, and the
    backend it ran on (the noop backend's `calls` log every backend call)."""

    path: Path
    metrics: list[dict[str, Any]]
    checkpoints: list[CheckpointRecord]
    backend: ServiceBackend

    def column(self, key: str) -> list[Any]:
        """The values of metric `key`, in step order, from the rows that have it."""
        return [row[key] for row in self.metrics if key in row]

    @property
    def events(self) -> list[dict[str, Any]]:
        events = self.path / "events.jsonl"
        if not events.exists():
            return []
        return [json.loads(line) for line in events.read_text(encoding="utf-8").splitlines() if line.strip()]

    @property
    def calls(self) -> list[Any]:
        """The backend calls, when the backend keeps a log of them (the noop backend does)."""
        return list(getattr(self.backend, "calls", []))


def as_recipe(target: Target, config: type[RunConfig] | None = None) -> Recipe:
    """`target` as a recipe; a workflow (or a builder of one) needs its `config` class."""
    if isinstance(target, Recipe):
        return target
    if isinstance(target, str):
        return get_recipe(target)
    if config is None:
        raise TypeError("running a workflow needs its config class: kitchen_run(workflow, config=MyConfig)")
    build = target if callable(target) and not isinstance(target, Workflow) else (lambda _config: target)
    return Recipe("test", "a workflow run by kitchen.testing", config, build)


def run_on_noop(
    target: Target,
    *overrides: str,
    log_path: Path,
    config: type[RunConfig] | None = None,
    replies: Callable[[str], str] | None = None,
    sampler_logprob_shift: float = 0.0,
    hooks: Sequence[Hooks] = (),
) -> RunResult:
    """Run `target` on the noop backend in `log_path` with `overrides` (`key=value`). `replies`
    scripts the fake model's reply text to each prompt (so an env's rewards are known);
    `sampler_logprob_shift` makes the sampler's logprobs differ from the trainer's by that much."""
    recipe = as_recipe(target, config)
    loaded = load_config(recipe.config_cls, None, ["backend=noop", f"log_path={log_path}", *overrides])
    backend = make_backend(loaded, log_path / "checkpoints")
    if replies is not None or sampler_logprob_shift:
        backend.script(replies=replies, sampler_logprob_shift=sampler_logprob_shift)  # type: ignore[attr-defined]
    run_dir = run_recipe(recipe, loaded, hooks=hooks, progress=False, backend=backend)
    return RunResult(run_dir.path, read_metrics(run_dir.metrics), read_records(run_dir.checkpoints), backend)


__all__ = ["RunResult", "Target", "as_recipe", "run_on_noop"]
