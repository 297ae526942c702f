"""Per-step metrics: gathered from stages (possibly out of order), written one row per step."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kitchen.engine.errors import run_dir_gone

HEADLINES: tuple[tuple[str, str, str, bool], ...] = (
    ("reward", "env/all/reward/total", "eval/all/reward/total", True),
    ("accuracy", "accuracy", "eval/accuracy", True),
    ("nll", "train_mean_nll", "eval/nll", False),
    ("loss", "loss", "eval/loss", False),
    ("dpo_loss", "dpo_loss", "eval/dpo_loss", False),
)
"""A run family's main metric: (label, train key, eval key, higher is better); the first one a run
logs wins: RL reward, DPO accuracy, supervised NLL, any loss. `kitchen runs` shows it, and
`keep_last` keeps the checkpoint with its best held-out value."""


class MetricsRecorder:
    """Collects metrics by optimizer step and appends one JSON row per step to `metrics.jsonl`.

    A stage that submits work whose results arrive later `hold`s its step; the row is written
    only after every hold is `release`d (holds count: a pending train step and a background
    evaluation may hold the same step), and rows are written in step order. What must follow a
    row (a checkpoint record) waits for it with `when_written`.
    """

    def __init__(self, path: Path | None = None, on_row: Callable[[dict[str, Any]], None] | None = None):
        self.path = path
        self.rows: list[dict[str, Any]] = []
        self._pending: dict[int, dict[str, float]] = {}
        self._held: dict[int, int] = {}
        """Step -> holds not yet released."""
        self._after_write: dict[int, list[Callable[[], None]]] = {}
        self._written_through = -1
        self._on_row = on_row
        self.before_write: Callable[[], None] | None = None
        """Called once before the first row is written (the run's commit point)."""

    def record(self, step: int, metrics: dict[str, Any]) -> None:
        row = self._pending.setdefault(step, {})
        for key, value in metrics.items():
            row[key] = float(value) if isinstance(value, (int, float)) else value

    def add_time(self, step: int, key: str, seconds: float) -> None:
        row = self._pending.setdefault(step, {})
        row[key] = row.get(key, 0.0) + seconds

    def hold(self, step: int) -> None:
        self._held[step] = self._held.get(step, 0) + 1

    def release(self, step: int) -> None:
        left = self._held.get(step, 0) - 1
        if left > 0:
            self._held[step] = left
        else:
            self._held.pop(step, None)

    def when_written(self, step: int, callback: Callable[[], None]) -> None:
        """Run `callback` once the row of `step` is written: now if it is (or has nothing to
        write), else right after it is."""
        if step in self._pending or step in self._held:
            self._after_write.setdefault(step, []).append(callback)
        else:
            callback()

    def discard(self) -> None:
        """Forget every pending row (a run that failed before it started logs nothing)."""
        self._pending.clear()
        self._held.clear()
        self._after_write.clear()

    def flush(self, through: int | None = None) -> None:
        """Write rows for pending steps <= `through` (all if None), stopping at the first held one."""
        for step in sorted(self._pending):
            if through is not None and step > through:
                break
            if step in self._held and through is not None:
                break
            self._write(step, self._pending.pop(step))
            self._held.pop(step, None)

    def _write(self, step: int, metrics: dict[str, Any]) -> None:
        row: dict[str, Any] = {"step": step, **{k: _json_safe(v) for k, v in sorted(metrics.items())}}
        self.rows.append(row)
        self._written_through = max(self._written_through, step)
        if self.before_write is not None:
            before, self.before_write = self.before_write, None
            before()
        if self.path is not None:
            try:
                append_line(self.path, json.dumps(row) + "\n")
            except OSError as exc:  # name the file: a bare "No space left on device" says nothing
                if isinstance(exc, FileNotFoundError) and not self.path.parent.is_dir():
                    raise run_dir_gone(self.path.parent) from None
                raise OSError(exc.errno, exc.strerror, str(self.path)) from None
        if self._on_row is not None:
            self._on_row(row)
        for callback in self._after_write.pop(step, []):
            callback()


def append_line(path: Path, line: str) -> None:
    """Append `line` to `path` with unbuffered os calls: the file is opened per row (a row must be on
    disk when written), and a Python file object would cost more than the write itself."""
    data = line.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(line, row) of every readable row; a torn or garbled line (a crash mid-write) is dropped."""
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            int(row["step"])
        except (ValueError, KeyError, TypeError, RecursionError):
            continue
        if isinstance(row, dict):
            rows.append((line, row))
    return rows


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl, merged by step (a step may be written in more than one row)."""
    merged: dict[int, dict[str, Any]] = {}
    if path.exists():
        for _, row in _rows(path):
            merged.setdefault(int(row["step"]), {}).update(row)
    return [merged[step] for step in sorted(merged)]


def truncate_metrics(path: Path, before_step: int) -> None:
    """Drop rows of steps >= `before_step` (on resume those steps are run and logged again) and
    any torn line."""
    if not path.exists():
        return
    kept = [line for line, row in _rows(path) if int(row["step"]) < before_step]
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    tmp.replace(path)
