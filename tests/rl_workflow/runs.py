"""Running the toy RL recipe on a noop backend the test can inspect."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from adapters.noop import NoopBackend
from kitchen.engine.config.loading import load_config
from kitchen.engine.context import Context
from kitchen.engine.hooks import Hooks
from kitchen.engine.launch import RunDir, run_recipe
from kitchen.engine.runs.metrics import read_metrics
from tests.rl_workflow.toy_task import TOY_RECIPE, ToyConfig


def noop_backend(log_path: Path, latency: dict[str, float] | None = None) -> NoopBackend:
    return NoopBackend(seed=0, latency=latency, checkpoint_dir=log_path / "checkpoints")


def run_toy(
    log_path: Path,
    *overrides: str,
    backend: NoopBackend | None = None,
    hooks: Sequence[Hooks] = (),
) -> tuple[RunDir, list[dict[str, Any]]]:
    config = load_config(ToyConfig, None, ["backend=noop", f"log_path={log_path}", *overrides])
    run_dir = run_recipe(TOY_RECIPE, config, hooks=hooks, progress=False, backend=backend or noop_backend(log_path))
    return run_dir, read_metrics(run_dir.metrics)


def without_times(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


class CrashAfterStep(Hooks):
    """Simulates a crash right after a step (its checkpoint, if due, is already recorded)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, ctx: Context, step: int) -> None:
        if step == self.step:
            raise RuntimeError("simulated crash")
