"""Runner: executes a workflow tree against a context.

One OpenTelemetry span per workflow and per stage, structlog events, hooks, per-stage timing
metrics (`time/<stage>`) inside step loops, `finally_` stages that run even after a failure, and
loop positions restored from a checkpoint record on resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import time
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any

from opentelemetry import trace
from pydantic import BaseModel, TypeAdapter, ValidationError

from kitchen.engine.config.sections import section_of
from kitchen.engine.context import Context, LoopPosition
from kitchen.engine.errors import RuntimeFailure, StageError, WiringError
from kitchen.engine.hooks import Hooks
from kitchen.engine.observe.logging import flush_events
from kitchen.engine.stage import Live, Stage, StageSpec
from kitchen.engine.workflow import Loop, Node, Parallel, When, Workflow, state_types
from train_core.errors import InvalidInputError

TOKENIZER_CALL = "ServiceBackend.get_tokenizer"
"""The one backend call that changes nothing: a run commits to its run dir before any other."""


class StageFailure(Exception):
    """A stage raised. Carries the stage name so the user sees where a run broke."""

    def __init__(self, stage: str, cause: BaseException) -> None:
        super().__init__(f"stage {stage!r} failed: {type(cause).__name__}: {cause}")
        self.stage = stage
        self.cause = cause

    @property
    def is_user_error(self) -> bool:
        if isinstance(self.cause, RuntimeFailure):
            return False
        return isinstance(self.cause, InvalidInputError) or is_environment_error(self.cause)


ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT}


def is_environment_error(exc: BaseException) -> bool:
    """A full disk, a read-only or unwritable file system: the user's to fix, not a bug."""
    return isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRNOS


class RunFinishError(InvalidInputError):
    """Writing the run's last metrics or records failed (e.g. the disk is full)."""


def settle_futures(state: dict[str, Any]) -> list[asyncio.Future[Any]]:
    """Every asyncio future held in the run state (in lists, dicts, or objects' fields), so a
    failed run can cancel or collect work it submitted and never awaited."""
    found: list[asyncio.Future[Any]] = []
    seen: set[int] = set()

    def walk(value: Any, depth: int) -> None:
        if id(value) in seen or depth > 3:
            return
        seen.add(id(value))
        if isinstance(value, asyncio.Future):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item, depth + 1)
        elif isinstance(value, (list, tuple, set)):
            for item in value:
                walk(item, depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            for item in vars(value).values():
                walk(item, depth + 1)

    walk(state, 0)
    return found


async def cancel_leftovers(state: dict[str, Any]) -> None:
    """Cancel submitted work nobody will await, and retrieve the errors of work that failed, so
    asyncio prints no 'exception was never retrieved' after the run's own error line."""
    futures = settle_futures(state)
    for future in futures:
        if not future.done():
            future.cancel()
    if futures:
        await asyncio.wait(futures, timeout=10)
    for future in futures:
        if future.done() and not future.cancelled():
            future.exception()


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


class _NoSpan:
    """Stands in for a stage span when no OpenTelemetry SDK is configured (spans would record
    nothing): creating and entering it costs next to nothing."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def record_exception(self, exception: BaseException) -> None:
        return None


_NO_SPAN = _NoSpan()


def records_spans(tracer: Any) -> bool:
    """Whether spans made with `tracer` go anywhere: a run's own tracer (`trace_file`, OTEL_*
    exporters: `kitchen.engine.observe.traces`) does; the API's default proxy does only once a global tracer
    provider is installed."""
    if isinstance(tracer, trace.NoOpTracer):
        return False
    if isinstance(tracer, trace.ProxyTracer):
        return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    return True


def stage_inputs(stage: Stage, spec: StageSpec, ctx: Context) -> dict[str, Any]:
    """The keyword arguments of the stage's `run` (`spec`: its spec): the state keys it reads (an
    optional one only when written), the config's section of each settings type, its ports."""
    state = ctx.state
    inputs: dict[str, Any] = {}
    for read in spec.reads:
        if read.live:
            inputs[read.param] = Live(state, read.key)
        elif read.key in state:
            inputs[read.param] = state[read.key]
        elif read.required:
            raise WiringError(f"{read.key!r} is not in the run state (read by stage {stage.name!r})")
    for param, model in spec.settings:
        inputs[param] = section_of(ctx.config, model)
    for param, port in spec.ports:
        inputs[param] = ctx.ports[port]
    return inputs


def store_outputs(stage: Stage, spec: StageSpec, ctx: Context, result: Any) -> None:
    """Put the fields of the dataclass a stage returned into the run state, under their keys."""
    if spec.output is None:
        if result is not None:
            raise WiringError(f"stage {stage.name!r} returned {type(result).__name__}; its run() declares no output")
        return
    if not isinstance(result, spec.output):
        raise WiringError(
            f"stage {stage.name!r} returned {type(result).__name__}, not the {spec.output.__name__} its run() declares"
        )
    for write in spec.writes:
        ctx.state[write.key] = getattr(result, write.field)


async def run_stage(stage: Stage, ctx: Context) -> None:
    """Run one stage against the context's run state: pass it what its `run` reads, store what it
    returns. (The runner adds spans, hooks and timing around this; tests call it alone.)"""
    spec = stage.spec
    args = (ctx,) if spec.takes_ctx else ()
    store_outputs(stage, spec, ctx, await stage.run(*args, **stage_inputs(stage, spec, ctx)))  # type: ignore[attr-defined]


def restore_persisted(ctx: Context) -> None:
    """The persisted keys of the checkpoint a run resumes from, checked against their declared types."""
    assert ctx.resume is not None
    for key, value in ctx.resume.state.items():
        adapter = ctx.persisted.get(key)
        if adapter is None:
            continue  # a key this workflow no longer persists
        try:
            ctx.state[key] = adapter.validate_python(value)
        except ValidationError as exc:
            raise StageError(
                f"checkpoint {ctx.resume.name!r}: its saved {key!r} does not fit the declared type: "
                f"{exc.errors()[0]['msg']}"
            ) from None


@contextlib.contextmanager
def setup_objects_frozen() -> Iterator[None]:
    """While the steps run, the objects alive when they start (modules, models, tokenizers: most of
    the heap, alive all run long) sit in the collector's permanent generation, so a full collection
    walks only what the steps made; walking everything took 100-200 ms per collection on the noop
    RL loop, a stall of the one event loop mid-step. Unfrozen after the steps, so a process that
    runs many runs can still collect their cycles; left alone if something froze objects already."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class Runner:
    def __init__(self, workflow: Workflow, hooks: Sequence[Hooks] = ()) -> None:
        self.workflow = workflow
        self.hooks = list(hooks)
        self._resume_loops: dict[str, int] = {}
        self._innermost_resumed: str | None = None
        self._step_loops = 0
        self._in_finally = False
        self._tracing = True

    async def run(self, ctx: Context) -> None:
        config_cls = type(ctx.config)
        self.workflow.validate(
            state_types(ctx.state), ctx.ports.keys(), config_cls if issubclass(config_cls, BaseModel) else None
        )
        ctx.persisted = {
            write.key: TypeAdapter(write.type) for stage in self.workflow.stages() for write in stage.spec.persisted
        }
        ctx.hooks = tuple(self.hooks)
        if ctx.resume is not None:
            restore_persisted(ctx)
            if ctx.resume.loops:
                self._resume_loops = dict(ctx.resume.loops)
                self._innermost_resumed = list(ctx.resume.loops)[-1]
        error: BaseException | None = None
        self._tracing = records_spans(ctx.tracer)
        with ctx.tracer.start_as_current_span(f"workflow {self.workflow.name}") as span:
            span.set_attribute("kitchen.workflow", self.workflow.name)
            stages = [stage.name for stage in self.workflow.stages()]
            ctx.log.info("run.start", workflow=self.workflow.name, step=ctx.step, stages=stages)
            for hook in self.hooks:
                hook.on_run_start(ctx, self.workflow)
            try:
                await self._run_nodes(self.workflow.steps, ctx)
            except BaseException as exc:
                error = exc
                await cancel_leftovers(ctx.state)
            finally_error = await self._run_finally(ctx)
            error = error or finally_error
            if error is None:
                ctx.commit()
            write_error = self._finish_writes(ctx)  # always runs; never hides an earlier error
            error = error or write_error
            if error is not None:
                span.record_exception(error)
                ctx.log.error("run.failed", workflow=self.workflow.name, error=str(error))
            else:
                ctx.log.info("run.end", workflow=self.workflow.name, steps=ctx.step)
            for hook in self.hooks:
                hook.on_run_end(ctx, error)
            flush_events()
        if error is not None:
            raise error

    def _finish_writes(self, ctx: Context) -> BaseException | None:
        """Write the last metrics rows and checkpoint records. A failure here (a full disk) is
        reported as one error naming the path, and never hides the stage error that came first."""
        try:
            if ctx.committed:
                ctx.metrics.flush()
                for callback in ctx.take_step_end_callbacks():
                    callback()
            else:
                ctx.metrics.discard()  # the run never started: its run dir stays as it was
                ctx.take_step_end_callbacks()
        except OSError as exc:
            return RunFinishError(f"could not write the run's logs: {exc.filename or ctx.run_dir}: {exc.strerror}")
        return None

    async def _run_finally(self, ctx: Context) -> BaseException | None:
        """Every finally_ stage runs, whatever happened before or in another finally_ stage."""
        first: BaseException | None = None
        self._in_finally = True
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
        spec = stage.spec
        if (
            not ctx.committed
            and not self._in_finally
            and any(call != "ServiceBackend.get_tokenizer" for call in spec.calls)
        ):
            ctx.commit()
        for hook in self.hooks:
            hook.before_stage(ctx, stage)
        started = time.perf_counter()
        span_context = ctx.tracer.start_as_current_span(f"stage {stage.name}") if self._tracing else _NO_SPAN
        with span_context as span:
            if self._tracing:
                span.set_attribute("kitchen.stage", stage.name)
                span.set_attribute("kitchen.step", ctx.step)
            try:
                await run_stage(stage, ctx)
            except StageFailure:
                raise
            except BaseException as exc:
                span.record_exception(exc)
                for hook in self.hooks:
                    hook.on_error(ctx, stage, exc)
                flush_events()  # the events up to the failure are on disk whatever happens next
                if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                    raise
                raise StageFailure(stage.name, exc) from exc
        seconds = time.perf_counter() - started
        if self._step_loops:
            # Inside a step loop the timing is a metric (`time/<stage>`), not an event: one event
            # per stage per step would cost more than the runner's own bookkeeping.
            ctx.metrics.add_time(ctx.step, f"time/{stage.name}", seconds)
        else:
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
        frozen = setup_objects_frozen() if loop.step and self._step_loops == 1 else contextlib.nullcontext()
        try:
            with frozen:
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
        ctx.last_step_loops = ctx.loop_positions()
        if ctx.usage is not None:
            ctx.metrics.record(ctx.step, ctx.usage.take_step())
        ctx.metrics.flush(through=ctx.step)
        for callback in ctx.take_step_end_callbacks():
            ctx.metrics.when_written(ctx.step, callback)  # after the row, which evals may still hold
        for hook in self.hooks:
            hook.on_step_end(ctx, ctx.step)
        flush_events()
        ctx.step += 1
