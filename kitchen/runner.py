"""Runner: executes a workflow tree against a context.

One OpenTelemetry span per workflow and per stage, structlog events, hooks, per-stage timing
metrics (`time/<stage>`) inside step loops, `finally_` stages that run even after a failure, and
loop positions restored from a checkpoint record on resume.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from typing import Any

from pydantic import BaseModel

from kitchen.context import Context, LoopPosition
from kitchen.errors import WiringError
from kitchen.hooks import Hooks
from kitchen.stage import Stage
from kitchen.workflow import Loop, Node, Parallel, When, Workflow
from train_core.errors import InvalidInputError


class StageFailure(Exception):
    """A stage raised. Carries the stage name so the user sees where a run broke."""

    def __init__(self, stage: str, cause: BaseException) -> None:
        super().__init__(f"stage {stage!r} failed: {type(cause).__name__}: {cause}")
        self.stage = stage
        self.cause = cause

    @property
    def is_user_error(self) -> bool:
        return isinstance(self.cause, InvalidInputError)


async def _all_or_cancel(coros: list[Coroutine[Any, Any, None]]) -> None:
    """Run concurrently; when one fails (or this is cancelled), cancel the others and wait for
    them before raising.

    Plain `gather` leaves the other branches running after a failure (e.g. a producer branch that
    only stops when the consumer says so), so they would outlive the run and its `finally_`.
    """
    tasks = [asyncio.create_task(coro) for coro in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()  # a no-op for finished tasks
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error


class Runner:
    def __init__(self, workflow: Workflow, hooks: Sequence[Hooks] = ()) -> None:
        self.workflow = workflow
        self.hooks = list(hooks)
        self._resume_loops: dict[str, int] = {}
        self._innermost_resumed: str | None = None
        self._step_loops = 0

    async def run(self, ctx: Context) -> None:
        config_cls = type(ctx.full_config)
        self.workflow.validate(
            ctx.state.keys(), ctx.ports.keys(), config_cls if issubclass(config_cls, BaseModel) else None
        )
        ctx.persist_keys = tuple(self.workflow.persisted_keys())
        ctx.hooks = tuple(self.hooks)
        if ctx.resume is not None and ctx.resume.loops:
            self._resume_loops = dict(ctx.resume.loops)
            self._innermost_resumed = list(ctx.resume.loops)[-1]
        error: BaseException | None = None
        with ctx.tracer.start_as_current_span(f"workflow {self.workflow.name}") as span:
            span.set_attribute("kitchen.workflow", self.workflow.name)
            ctx.log.info("run.start", workflow=self.workflow.name, step=ctx.step)
            for hook in self.hooks:
                hook.on_run_start(ctx, self.workflow)
            try:
                await self._run_nodes(self.workflow.steps, ctx)
            except BaseException as exc:
                error = exc
            finally_error = await self._run_finally(ctx)
            error = error or finally_error
            ctx.metrics.flush()
            for callback in ctx.take_step_end_callbacks():
                callback()
            if error is not None:
                span.record_exception(error)
                ctx.log.error("run.failed", workflow=self.workflow.name, error=str(error))
            else:
                ctx.log.info("run.end", workflow=self.workflow.name, steps=ctx.step)
            for hook in self.hooks:
                hook.on_run_end(ctx, error)
        if error is not None:
            raise error

    async def _run_finally(self, ctx: Context) -> BaseException | None:
        """Every finally_ stage runs, whatever happened before or in another finally_ stage."""
        first: BaseException | None = None
        for stage in self.workflow.finally_:
            try:
                await self._run_stage(stage, ctx)
            except BaseException as exc:
                first = first or exc
        return first

    async def _run_nodes(self, nodes: Sequence[Node], ctx: Context) -> None:
        for node in nodes:
            if isinstance(node, Stage):
                await self._run_stage(node, ctx)
            elif isinstance(node, Loop):
                await self._run_loop(node, ctx)
            elif isinstance(node, When):
                if node.predicate(ctx):
                    await self._run_nodes(node.body, ctx)
            elif isinstance(node, Parallel):
                await _all_or_cancel([self._run_nodes(branch, ctx) for branch in node.branches])
            else:
                raise WiringError(f"not a workflow node: {node!r}")

    async def _run_stage(self, stage: Stage, ctx: Context) -> None:
        for hook in self.hooks:
            hook.before_stage(ctx, stage)
        started = time.perf_counter()
        with ctx.tracer.start_as_current_span(f"stage {stage.name}") as span, ctx.running(stage):
            span.set_attribute("kitchen.stage", stage.name)
            span.set_attribute("kitchen.step", ctx.step)
            try:
                await stage.run(ctx)
            except StageFailure:
                raise
            except BaseException as exc:
                span.record_exception(exc)
                for hook in self.hooks:
                    hook.on_error(ctx, stage, exc)
                if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                    raise
                raise StageFailure(stage.name, exc) from exc
        seconds = time.perf_counter() - started
        if self._step_loops:
            ctx.metrics.add_time(ctx.step, f"time/{stage.name}", seconds)
        ctx.log.debug("stage.end", stage=stage.name, step=ctx.step, seconds=round(seconds, 6))
        for hook in self.hooks:
            hook.after_stage(ctx, stage, seconds)

    def _start_index(self, loop: Loop) -> int:
        if loop.name not in self._resume_loops:
            return 0
        index = self._resume_loops.pop(loop.name)
        # The innermost saved loop had finished that iteration; outer loops resume inside theirs.
        return index + 1 if loop.name == self._innermost_resumed else index

    async def _run_loop(self, loop: Loop, ctx: Context) -> None:
        total = int(ctx.state[loop.over]) if isinstance(loop.over, str) else int(loop.over(ctx))
        start = self._start_index(loop)
        if loop.step:
            self._step_loops += 1
            ctx.total_steps = total
        if loop.reduce_metrics:
            ctx.open_metric_scope()
        try:
            for index in range(start, total):
                ctx.enter_loop(loop.name, LoopPosition(index, total))
                await self._run_nodes(loop.body, ctx)
                if loop.step:
                    self._end_step(ctx)
            if loop.reduce_metrics:
                ctx.close_metric_scope()
        finally:
            ctx.exit_loop(loop.name)
            if loop.step:
                self._step_loops -= 1

    def _end_step(self, ctx: Context) -> None:
        ctx.metrics.flush(through=ctx.step)
        for callback in ctx.take_step_end_callbacks():
            callback()
        for hook in self.hooks:
            hook.on_step_end(ctx, ctx.step)
        ctx.step += 1
