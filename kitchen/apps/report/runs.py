"""`kitchen runs`: one line per run directory under a folder, newest first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kitchen.apps.report.rundata import RunData, is_run_dir, load_run, metric_value
from kitchen.engine.errors import KitchenError
from kitchen.engine.runs.metrics import HEADLINES


@dataclass(frozen=True)
class RunLine:
    name: str
    recipe: str
    status: str
    steps: int
    headline: str
    updated: float


def _last(rows: list[dict[str, Any]], key: str) -> float | None:
    for row in reversed(rows):
        value = metric_value(row.get(key))
        if value is not None:
            return value
    return None


def headline(rows: list[dict[str, Any]]) -> str:
    """The run family's main metric, last logged value: `reward 0.13 (eval 0.14)`."""
    for label, train_key, eval_key, _ in HEADLINES:
        train, held_out = _last(rows, train_key), _last(rows, eval_key)
        if train is None and held_out is None:
            continue
        parts = [label, f"{train:.4g}" if train is not None else "-"]
        if held_out is not None:
            parts.append(f"(eval {held_out:.4g})")
        return " ".join(parts)
    return "-"


def run_line(run: RunData) -> RunLine:
    return RunLine(
        name=run.path.name,
        recipe=run.recipe or "?",
        status=run.status.label,
        steps=run.steps_done,
        headline=headline(run.rows),
        updated=run.last_write or 0.0,
    )


@dataclass(frozen=True)
class RunListing:
    lines: list[RunLine]
    skipped: list[str]
    """One warning per run directory left out because its config.yaml cannot be read."""


def list_runs(folder: Path, now: float) -> RunListing:
    """Run directories directly under `folder`, most recently written first; one whose config.yaml
    cannot be read (not UTF-8, invalid YAML) is skipped with a warning rather than failing the list."""
    if not folder.is_dir():
        raise KitchenError(f"{folder} is not a directory")
    lines, skipped = [], []
    for path in sorted(folder.iterdir()):
        if not is_run_dir(path):
            continue
        run = load_run(path, now)
        if run.config_problem is not None:
            skipped.append(f"skipped {path}: config.yaml {run.config_problem}")
            continue
        lines.append(run_line(run))
    return RunListing(sorted(lines, key=lambda line: line.updated, reverse=True), skipped)


def format_runs(lines: list[RunLine]) -> str:
    """An aligned table, one run per line, with a header."""
    table = [("RUN", "RECIPE", "STATUS", "STEPS", "UPDATED", "HEADLINE")]
    table += [
        (line.name, line.recipe, line.status, str(line.steps), _when(line.updated), line.headline) for line in lines
    ]
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True)), row[5]]).rstrip()
        for row in table
    )


def _when(stamp: float) -> str:
    return datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M") if stamp else "-"
