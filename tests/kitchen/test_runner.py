"""Runner semantics: order, loops, hooks, spans, finally_, timing, declared-state enforcement."""

from __future__ import annotations

import asyncio
import gc
import re
import time
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

from kitchen.engine.context import Context
from kitchen.engine.errors import WiringError
from kitchen.engine.hooks import Hooks
from kitchen.engine.runner import Runner, StageFailure
from kitchen.engine.runs.checkpoints import CheckpointRecord
from kitchen.engine.runs.metrics import MetricsRecorder
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Loop, Parallel, When, Workflow, every

_EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
trace.set_tracer_provider(_provider)


class Period(BaseModel):
    every_n: int = 2


class Cfg(BaseModel):
    period: Period = Period()


LogEntry = tuple[str, int, int | None]


@dataclass(frozen=True)
class Log:
    log: list[LogEntry]


class Append(Stage):
    """Appends (name, step, loop index) to the shared `log` list."""

    async def run(self, ctx: Context, log: list[LogEntry]) -> Log:
        index = ctx.loop("steps").index if "steps" in ctx.loop_positions() else None
        ctx.record({f"seen/{self.name}": 1.0})
        return Log([*log, (self.name, ctx.step, index)])


class Boom(Stage):
    async def run(self, ctx: Context) -> None:
        raise RuntimeError("kaboom")


class Sleep(Stage):
    def __init__(self, seconds: float, name: str) -> None:
        super().__init__(name)
        self.seconds = seconds

    async def run(self, ctx: Context) -> None:
        await asyncio.sleep(self.seconds)


class Recorder(Hooks):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_run_start(self, ctx: Context, workflow: Workflow) -> None:
        self.events.append(("run_start", workflow.name))

    def on_run_end(self, ctx: Context, error: BaseException | None) -> None:
        self.events.append(("run_end", type(error).__name__ if error else None))

    def before_stage(self, ctx: Context, stage: Stage) -> None:
        self.events.append(("before", stage.name))

    def after_stage(self, ctx: Context, stage: Stage, seconds: float) -> None:
        self.events.append(("after", stage.name))

    def on_step_end(self, ctx: Context, step: int) -> None:
        self.events.append(("step_end", step))

    def on_error(self, ctx: Context, stage: Stage | None, error: BaseException) -> None:
        self.events.append(("error", stage.name if stage else None))


def make_ctx(**kwargs: Any) -> Context:
    return Context(config=Cfg(), ports={}, state={"log": [], "n": 3}, metrics=MetricsRecorder(), **kwargs)


def test_loops_when_and_hooks_run_in_order() -> None:
    hooks = Recorder()
    workflow = Workflow(
        "wf",
        [
            Append(name="setup"),
            Loop(
                "steps",
                over="n",
                step=True,
                body=[Append(name="body"), When("even", every(Period, lambda p: p.every_n), [Append(name="due")])],
            ),
        ],
        finally_=[Append(name="cleanup")],
    )
    ctx = make_ctx()
    asyncio.run(Runner(workflow, [hooks]).run(ctx))
    assert ctx.state["log"] == [
        ("setup", 0, None),
        ("body", 0, 0),
        ("body", 1, 1),
        ("due", 1, 1),
        ("body", 2, 2),
        ("cleanup", 3, None),
    ]
    assert [e for e in hooks.events if e[0] == "step_end"] == [("step_end", 0), ("step_end", 1), ("step_end", 2)]
    assert hooks.events[0] == ("run_start", "wf") and hooks.events[-1] == ("run_end", None)
    assert ctx.step == 3


def test_per_stage_timing_metrics_are_recorded_per_step() -> None:
    workflow = Workflow("timed", [Loop("steps", over="n", step=True, body=[Sleep(0.01, "nap")])])
    ctx = make_ctx()
    asyncio.run(Runner(workflow).run(ctx))
    assert [row["step"] for row in ctx.metrics.rows] == [0, 1, 2]
    assert all(row["time/nap"] >= 0.009 for row in ctx.metrics.rows)


def test_finally_runs_after_failure_and_error_names_stage() -> None:
    hooks = Recorder()
    workflow = Workflow(
        "fails", [Append(name="first"), Boom(), Append(name="never")], finally_=[Append(name="cleanup")]
    )
    ctx = make_ctx()
    with pytest.raises(StageFailure, match="stage 'boom' failed: RuntimeError: kaboom"):
        asyncio.run(Runner(workflow, [hooks]).run(ctx))
    assert [entry[0] for entry in ctx.state["log"]] == ["first", "cleanup"]
    assert ("error", "boom") in hooks.events
    assert hooks.events[-1] == ("run_end", "StageFailure")


def test_a_stage_returning_another_type_than_it_declares_fails_loudly() -> None:
    class Liar(Stage):
        async def run(self, log: list[LogEntry]) -> Log:
            return {"log": log}  # type: ignore[return-value]

    with pytest.raises(StageFailure) as info:
        asyncio.run(Runner(Workflow("s", [Liar()])).run(make_ctx()))
    assert isinstance(info.value.cause, WiringError)
    assert "returned dict, not the Log its run() declares" in str(info.value)


def test_a_stage_returning_a_value_it_does_not_declare_fails_loudly() -> None:
    class Sneaky(Stage):
        async def run(self) -> None:
            return Log([])  # type: ignore[return-value]

    with pytest.raises(StageFailure, match="returned Log; its run\\(\\) declares no output"):
        asyncio.run(Runner(Workflow("s", [Sneaky()])).run(make_ctx()))


def test_the_runner_passes_reads_and_stores_writes_by_key() -> None:
    class Count(Stage):
        async def run(self, log: list[LogEntry], n: int) -> Log:
            return Log([*log, ("count", n, None)])

    ctx = make_ctx()
    asyncio.run(Runner(Workflow("s", [Count(), Count("again", keys={"n": "n"})])).run(ctx))
    assert ctx.state["log"] == [("count", 3, None), ("count", 3, None)]


def test_runner_validates_before_running_anything() -> None:
    class NeedsMissing(Stage):
        async def run(self, missing: int) -> None: ...

    ctx = make_ctx()
    with pytest.raises(WiringError, match="'needs_missing' reads 'missing'"):
        asyncio.run(Runner(Workflow("v", [Append(name="a"), NeedsMissing()])).run(ctx))
    assert ctx.state["log"] == []


def test_parallel_really_overlaps() -> None:
    workflow = Workflow("par", [Parallel("p", [[Sleep(0.2, "a")], [Sleep(0.2, "b")], [Sleep(0.2, "c")]])])
    started = time.perf_counter()
    asyncio.run(Runner(workflow).run(make_ctx()))
    assert time.perf_counter() - started < 0.45


def test_spans_per_workflow_and_stage() -> None:
    _EXPORTER.clear()
    asyncio.run(Runner(Workflow("spanned", [Append(name="one"), Append(name="two")])).run(make_ctx()))
    names = [span.name for span in _EXPORTER.get_finished_spans()]
    assert names == ["stage one", "stage two", "workflow spanned"]


def test_resume_restarts_after_the_saved_step() -> None:
    record = CheckpointRecord(name="000002", step=2, loops={"steps": 1}, state_path="x")
    ctx = make_ctx(resume=record)
    workflow = Workflow("resumed", [Loop("steps", over="n", step=True, body=[Append(name="body")])])
    asyncio.run(Runner(workflow).run(ctx))
    assert ctx.state["log"] == [("body", 2, 2)]


def test_step_end_callbacks_run_after_the_row_is_written() -> None:
    seen: list[list[int]] = []

    class Defer(Stage):
        async def run(self, ctx: Context) -> None:
            ctx.record({"x": 1.0})
            ctx.at_step_end(lambda: seen.append([row["step"] for row in ctx.metrics.rows]))

    ctx = make_ctx()
    asyncio.run(Runner(Workflow("d", [Loop("steps", over="n", step=True, body=[Defer()])])).run(ctx))
    assert seen == [[0], [0, 1], [0, 1, 2]]


def test_progress_hook_prints_one_line_per_step_when_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from kitchen.engine.hooks import ProgressHook

    class Nll(Stage):
        async def run(self, ctx: Context) -> None:
            ctx.record({"train_mean_nll": 2.0 - ctx.step})

    workflow = Workflow("p", [Loop("steps", over="n", step=True, body=[Nll()])])
    asyncio.run(Runner(workflow, [ProgressHook(interactive=False)]).run(make_ctx()))
    lines = [re.sub(r" eta \S+$", "", line) for line in capsys.readouterr().out.splitlines()]
    assert lines[:3] == [
        "step 1/3 train_mean_nll=2",
        "step 2/3 train_mean_nll=1",
        "step 3/3 train_mean_nll=0",
    ]
    assert lines[3].startswith("done: 3 steps in ") and lines[3].endswith("; train_mean_nll=0")


class NoteFrozen(Stage):
    """Notes how many objects sit in the collector's permanent generation while it runs."""

    async def run(self, ctx: Context, log: list[LogEntry]) -> Log:
        return Log([*log, (self.name, ctx.step, gc.get_freeze_count())])


def test_the_steps_run_with_the_setup_objects_frozen_and_unfrozen_after() -> None:
    """A full collection then walks only what the steps made (not the modules and models), and a
    process running many runs can still collect their cycles once each is over."""
    inner = Loop("inner", over="n", body=[NoteFrozen(name="in_inner")])
    workflow = Workflow(
        "wf", [NoteFrozen(name="setup"), Loop("steps", over="n", step=True, body=[NoteFrozen(name="body"), inner])]
    )
    ctx = make_ctx()
    assert gc.get_freeze_count() == 0
    asyncio.run(Runner(workflow).run(ctx))
    frozen = {name: count for name, _, count in ctx.state["log"]}
    # the inner loop neither unfreezes nor freezes again (which would add what the step made); the
    # count may fall a little in between: a frozen object still dies when its last reference goes
    # (another test's threads let go of theirs)
    assert frozen["setup"] == 0 and frozen["body"] > 1000 and 1000 < frozen["in_inner"] <= frozen["body"]
    assert gc.get_freeze_count() == 0
    with pytest.raises(StageFailure):
        asyncio.run(Runner(Workflow("wf", [Loop("steps", over="n", step=True, body=[Boom(name="boom")])])).run(ctx))
    assert gc.get_freeze_count() == 0
