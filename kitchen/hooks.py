"""Runner hooks: observe a run without changing it (progress, custom logging, early alerts)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kitchen.context import Context
    from kitchen.stage import Stage
    from kitchen.workflow import Workflow


class Hooks:
    """Override any subset. Exceptions raised by hooks propagate: a hook is part of the run."""

    def on_run_start(self, ctx: Context, workflow: Workflow) -> None: ...

    def on_run_end(self, ctx: Context, error: BaseException | None) -> None: ...

    def before_stage(self, ctx: Context, stage: Stage) -> None: ...

    def after_stage(self, ctx: Context, stage: Stage, seconds: float) -> None: ...

    def on_step_end(self, ctx: Context, step: int) -> None: ...

    def on_error(self, ctx: Context, stage: Stage | None, error: BaseException) -> None: ...


_SHOWN_KEYS = ("train_mean_nll", "loss", "dpo_loss", "env/all/reward/total", "accuracy", "eval/nll")


def _summary(row: dict[str, Any]) -> str:
    keys = [*_SHOWN_KEYS, *(f"eval/{key}" for key in _SHOWN_KEYS if not key.startswith("eval/"))]
    parts = [f"{key}={row[key]:.4g}" for key in dict.fromkeys(keys) if isinstance(row.get(key), float)]
    return " ".join(parts)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class ProgressHook(Hooks):
    """A rich progress bar on a terminal; one plain line per step otherwise (logs, CI).

    Shows the stage being run while no step is (setup, an RL warm start, the final evaluation),
    an ETA from this session's step times, each step's headline metrics once its row is written
    (pipelined stages write a step's row when its results arrive, so the bar names the step a
    summary belongs to), metrics recorded after the last step as `final`, and a short summary at
    the end.
    """

    def __init__(self, interactive: bool | None = None) -> None:
        self.interactive = sys.stdout.isatty() if interactive is None else interactive
        self._progress: Any = None
        self._task: Any = None
        self._rows_seen = 0
        self._workflow = ""
        self._started = 0.0
        self._first_step_at: float | None = None
        self._first_step = 0
        self._last: dict[str, Any] = {}

    def on_run_start(self, ctx: Context, workflow: Workflow) -> None:
        self._workflow = workflow.name
        self._started = time.monotonic()
        self._first_step = ctx.step
        if self.interactive:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[summary]}"),
            )
            self._progress.start()
            self._task = self._progress.add_task(workflow.name, total=None, completed=ctx.step, summary="")

    @staticmethod
    def _in_steps(ctx: Context) -> bool:
        return ctx.total_steps is not None and ctx.step < ctx.total_steps

    def before_stage(self, ctx: Context, stage: Stage) -> None:
        if self._in_steps(ctx):
            return
        if self._progress is not None:
            self._progress.update(self._task, description=f"{self._workflow}: {stage.name}")
        else:
            print(f"[{stage.name}]", flush=True)

    def _eta(self, ctx: Context, done: int) -> str:
        if ctx.total_steps is None or self._first_step_at is None or done <= self._first_step + 1:
            return ""
        per_step = (time.monotonic() - self._first_step_at) / (done - self._first_step - 1)
        return f"eta {_duration(per_step * (ctx.total_steps - done))}"

    def on_step_end(self, ctx: Context, step: int) -> None:
        if self._first_step_at is None:
            # step times are measured from the end of the first step: setup is not a step
            self._first_step_at = time.monotonic()
        rows = ctx.metrics.rows[self._rows_seen :]
        self._rows_seen = len(ctx.metrics.rows)
        if rows:
            self._last.update(rows[-1])
        if self._progress is not None:
            summary = ""
            if rows:
                summary = _summary(rows[-1])
                if rows[-1]["step"] != step and summary:
                    summary = f"(step {rows[-1]['step'] + 1}) {summary}"
            self._progress.update(
                self._task, description=self._workflow, total=ctx.total_steps, completed=step + 1, summary=summary
            )
            return
        self._print(rows, ctx.total_steps, self._eta(ctx, step + 1))

    def on_run_end(self, ctx: Context, error: BaseException | None) -> None:
        rows = ctx.metrics.rows[self._rows_seen :]
        self._rows_seen = len(ctx.metrics.rows)
        for row in rows:
            self._last.update(row)
        if self._progress is not None:
            self._progress.stop()
            for row in rows:
                if ctx.total_steps is not None and row["step"] >= ctx.total_steps and _summary(row):
                    print(f"final {_summary(row)}", flush=True)
        else:
            self._print(rows, ctx.total_steps, "")
        if error is None:
            self._print_summary(ctx)

    def _print_summary(self, ctx: Context) -> None:
        steps = ctx.step - self._first_step
        headline = _summary(self._last)
        print(
            f"done: {steps} step{'s' if steps != 1 else ''} in {_duration(time.monotonic() - self._started)}"
            + (f"; {headline}" if headline else ""),
            flush=True,
        )
        if ctx.run_dir is not None:
            print(f"run dir: {ctx.run_dir}  (plots: kitchen report {ctx.run_dir})", flush=True)

    @staticmethod
    def _print(rows: list[dict[str, Any]], total: int | None, eta: str) -> None:
        for index, row in enumerate(rows):
            label = "final" if total is not None and row["step"] >= total else f"step {row['step'] + 1}/{total or '?'}"
            tail = f" {eta}" if eta and index == len(rows) - 1 else ""
            print(f"{label} {_summary(row)}{tail}".rstrip(), flush=True)
