"""Launching a recipe: run directory, resume detection, logging, backend, then the runner."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitchen.backends import make_backend
from kitchen.checkpoints import CheckpointRecord, last_resumable
from kitchen.config import RunConfig, dump_config
from kitchen.context import Context
from kitchen.hooks import Hooks, ProgressHook
from kitchen.logging import make_run_logger
from kitchen.metrics import MetricsRecorder, truncate_metrics
from kitchen.ports import ServiceBackend
from kitchen.recipe import Recipe
from kitchen.runner import Runner
from kitchen.validation import validate_recipe


@dataclass(frozen=True)
class RunDir:
    """The files of one run (see ARCHITECTURE.md, 'Runs on disk')."""

    path: Path

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints.jsonl"

    @property
    def events(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / "checkpoints"


def resolve_log_path(recipe: str, config: RunConfig) -> Path:
    if config.log_path:
        return Path(config.log_path)
    return Path("runs") / f"{recipe}-{time.strftime('%Y%m%d-%H%M%S')}"


def build_context(
    recipe: Recipe,
    config: RunConfig,
    run_dir: RunDir,
    backend: ServiceBackend,
    resume: CheckpointRecord | None,
    logger: Any,
) -> Context:
    return Context(
        config=config,
        ports={"service": backend},
        state=recipe.initial_state(config),
        run_dir=run_dir.path,
        metrics=MetricsRecorder(run_dir.metrics),
        logger=logger,
        resume=resume,
    )


def run_recipe(
    recipe: Recipe,
    config: RunConfig,
    hooks: Sequence[Hooks] = (),
    progress: bool = True,
    backend: ServiceBackend | None = None,
) -> RunDir:
    """Run `recipe` with `config`; resumes if `log_path` already holds a resumable checkpoint."""
    return asyncio.run(run_recipe_async(recipe, config, hooks, progress, backend))


async def run_recipe_async(
    recipe: Recipe,
    config: RunConfig,
    hooks: Sequence[Hooks] = (),
    progress: bool = True,
    backend: ServiceBackend | None = None,
) -> RunDir:
    """`run_recipe` inside a running event loop (e.g. a recipe that runs others as sub-runs, each
    in its own directory). The sub-run's stages see none of the caller's stage declarations."""
    workflow = validate_recipe(recipe, config)
    run_dir = RunDir(resolve_log_path(recipe.name, config))
    run_dir.path.mkdir(parents=True, exist_ok=True)
    resume = last_resumable(run_dir.checkpoints) if config.resume == "auto" else None
    if resume is not None:
        truncate_metrics(run_dir.metrics, before_step=resume.step)
    elif run_dir.metrics.exists() and config.resume == "never":
        run_dir.metrics.unlink()
    dump_config(config, run_dir.config)
    logger, sink = make_run_logger(run_dir.events, recipe=recipe.name)
    if resume is not None:
        logger.warning("run.resume", checkpoint=resume.name, step=resume.step, log_path=str(run_dir.path))
    service = backend or make_backend(config, run_dir.checkpoint_dir)
    ctx = build_context(recipe, config, run_dir, service, resume, logger)
    all_hooks = [*hooks, ProgressHook()] if progress else list(hooks)
    try:
        # A fresh contextvars context: the runner and its stages start with no stage running.
        await asyncio.create_task(Runner(workflow, all_hooks).run(ctx), context=contextvars.Context())
    finally:
        sink.close()
    return run_dir
