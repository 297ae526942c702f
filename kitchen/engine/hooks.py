"""Runner hooks: observe a run without changing it (progress, custom logging, early alerts)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kitchen.engine.context import Context
    from kitchen.engine.stage import Stage
    from kitchen.engine.workflow import Workflow


class Hooks:
    """Override any subset. Exceptions raised by hooks propagate: a hook is part of the run."""

    def on_run_start(self, ctx: Context, workflow: Workflow) -> None: ...

    def on_run_end(self, ctx: Context, error: BaseException | None) -> None: ...

    def before_stage(self, ctx: Context, stage: Stage) -> None: ...

    def after_stage(self, ctx: Context, stage: Stage, seconds: float) -> None: ...

    def on_step_end(self, ctx: Context, step: int) -> None: ...

    def on_error(self, ctx: Context, stage: Stage | None, error: BaseException) -> None: ...

    def on_progress(self, ctx: Context, phase: str, done: int, total: int | None, metrics: dict[str, float]) -> None:
        """A long stage's progress inside it (`report_progress`): `done` of `total` units."""


def report_progress(
    ctx: Context, phase: str, done: int, total: int | None, metrics: dict[str, float] | None = None
) -> None:
    """Tell the run's hooks how far a long stage has got (an RL warm start's steps, ...), so the
    console is not silent for minutes."""
    for hook in getattr(ctx, "hooks", ()):
        hook.on_progress(ctx, phase, done, total, metrics or {})


SHOWN_METRICS: tuple[tuple[str, str, str | None], ...] = (
    ("train_mean_nll", "train_mean_nll", "eval/nll"),
    ("loss", "loss", "eval/loss"),
    ("dpo_loss", "dpo_loss", "eval/dpo_loss"),
    ("env/all/reward/total", "reward", "eval/all/reward/total"),
    ("env/all/correct", "correct", "eval/all/correct"),
    ("env/all/pass", "pass", "eval/all/pass"),
    ("teacher_kl", "teacher_kl", "eval/teacher_kl"),
    ("accuracy", "accuracy", "eval/accuracy"),
    ("optim/kl_sample_train_v1", "kl_mismatch", None),
    ("numerics/max_abs_diff", "max_logprob_diff", None),
    ("numerics/last_turn_depth", "deepest_turn_at", None),
)
"""(metric, label, held-out metric) shown per step when a row has them: what the users of each
family watch: NLL (supervised), DPO loss and accuracy, RL reward, correct answers (math) and
passed tests (code), teacher KL (distillation), the sampler/trainer mismatch KL and, with the
numerics check, the largest per-token logprob difference and how deep its last turn went."""

HIDDEN_BY = {"env/all/reward/total": "teacher_kl"}
"""A metric left out when another is in the row: distillation's prompt-only envs always give
reward 0, so its console shows the teacher KL instead."""


def _summary(row: dict[str, Any]) -> str:
    shown = [entry for entry in SHOWN_METRICS if HIDDEN_BY.get(entry[0]) not in row]
    held_out = [(eval_key, eval_key if label == key else f"eval/{label}") for key, label, eval_key in shown if eval_key]
    pairs = [*((key, label) for key, label, _ in shown), *held_out]
    return " ".join(f"{label}={row[key]:.4g}" for key, label in pairs if isinstance(row.get(key), float))


def _metrics_text(metrics: dict[str, float]) -> str:
    return " ".join(f"{key}={value:.4g}" for key, value in metrics.items())


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class ProgressHook(Hooks):
    """A rich progress bar on a terminal; one plain line per step otherwise (logs, CI).

    Shows the stage being run while no step is (setup, an RL warm start, the final evaluation)
    and how far a long one has got (`report_progress`: `[warm_start] 120/500 nll=2.3 eta 3m05s`),
    an ETA from this session's step times, each step's headline metrics once its row is written
    (pipelined stages write a step's row when its results arrive, so the bar names the step a
    summary belongs to), metrics recorded after the last step as `final`, and a short summary at
    the end.
    """

    def __init__(self, interactive: bool | None = None, progress_every_s: float = 10.0) -> None:
        self.interactive = sys.stdout.isatty() if interactive is None else interactive
        self.progress_every_s = progress_every_s
        """Off a terminal, a long stage's progress is printed at most this often (and when done)."""
        self._phase: tuple[str, float, int] | None = None
        self._phase_printed = 0.0
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

    def on_progress(self, ctx: Context, phase: str, done: int, total: int | None, metrics: dict[str, float]) -> None:
        now = time.monotonic()
        if self._phase is None or self._phase[0] != phase:
            self._phase, self._phase_printed = (phase, now, done), 0.0
        _, started, first = self._phase
        eta = ""
        if total and first < done < total:  # timed from the first report, as steps are
            eta = f"eta {_duration((now - started) / (done - first) * (total - done))}"
        if self._progress is not None:
            self._progress.update(
                self._task,
                description=f"{self._workflow}: {phase}",
                total=total,
                completed=done,
                summary=_metrics_text(metrics),
            )
            return
        if done == total or now - self._phase_printed >= self.progress_every_s:
            self._phase_printed = now
            text = f"[{phase}] {done}/{total or '?'} {_metrics_text(metrics)} {eta}"
            print(" ".join(text.split()), flush=True)

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
