"""Reading a run directory for reports: tolerant of runs that are still going or crashed.

Every JSONL file may end in a torn line (the process was killed mid-write) or hold a bad line;
such lines are skipped and counted, never fatal, so a report can always be made.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import yaml

from kitchen.engine.config.yaml_bounded import load_yaml
from kitchen.engine.errors import KitchenError
from kitchen.engine.launch import RunDir
from kitchen.engine.runs.checkpoints import CheckpointRecord

State = Literal["finished", "failed", "interrupted", "running"]

# A run without an end event whose files changed this recently is taken to be still running.
RUNNING_WITHIN_S = 600.0

_STAGE_FAILURE = re.compile(r"^stage '(?P<stage>[^']+)' failed: (?P<cause>.*)$", re.DOTALL)


@dataclass(frozen=True)
class JsonlFile:
    """The parsed objects of one JSONL file and how many lines could not be parsed."""

    records: list[dict[str, Any]]
    bad_lines: int = 0


def read_jsonl(path: Path) -> JsonlFile:
    """Objects of a JSONL file, skipping blank, torn or non-object lines; a missing file is empty."""
    if not path.is_file():
        return JsonlFile([])
    records: list[dict[str, Any]] = []
    bad = 0
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                bad += 1
                continue
            if isinstance(record, dict):
                records.append(record)
            else:
                bad += 1
    return JsonlFile(records, bad)


def metric_value(value: Any) -> float | None:
    """A plottable number, or None: the recorder writes non-finite floats as strings ('nan')."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def merge_metric_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per step, in step order: a step may be written in more than one row."""
    merged: dict[int, dict[str, Any]] = {}
    for record in records:
        step = record.get("step")
        if isinstance(step, (int, float)) and not isinstance(step, bool):
            merged.setdefault(int(step), {}).update(record)
    return [merged[step] for step in sorted(merged)]


def _timestamp(event: dict[str, Any]) -> datetime | None:
    raw = event.get("timestamp")
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class RunStatus:
    """How the latest attempt of a run ended, as far as its events tell."""

    state: State
    failed_stage: str | None = None
    error: str | None = None

    @property
    def label(self) -> str:
        if self.state == "failed":
            return f"failed at stage {self.failed_stage}" if self.failed_stage else "failed"
        return self.state


def run_status(events: list[dict[str, Any]], seconds_since_write: float | None) -> RunStatus:
    """Status of the last attempt (after the last `run.start`): end event, failure or neither.

    `run.failed` with an empty error is an interrupt (Ctrl-C or cancellation carry no message);
    a StageFailure message names the stage. Without an end event the run is still going if its
    files changed within RUNNING_WITHIN_S, else it was killed.
    """
    starts = [i for i, event in enumerate(events) if event.get("event") == "run.start"]
    attempt = events[starts[-1] :] if starts else events
    for event in reversed(attempt):
        name = event.get("event")
        if name == "run.end":
            return RunStatus("finished")
        if name == "run.failed":
            error = str(event.get("error") or "")
            if not error:
                return RunStatus("interrupted")
            match = _STAGE_FAILURE.match(error)
            if match:
                return RunStatus("failed", match["stage"], match["cause"])
            return RunStatus("failed", None, error)
    if seconds_since_write is not None and seconds_since_write <= RUNNING_WITHIN_S:
        return RunStatus("running")
    return RunStatus("interrupted")


@dataclass(frozen=True)
class Timing:
    """When the last attempt started and how long it ran (to its end event or last event)."""

    started: datetime | None
    wall_seconds: float | None
    attempts: int


def run_timing(events: list[dict[str, Any]]) -> Timing:
    starts = [i for i, event in enumerate(events) if event.get("event") == "run.start"]
    if not starts:
        return Timing(None, None, 0)
    attempt = events[starts[-1] :]
    started = _timestamp(attempt[0])
    stamps = [stamp for stamp in map(_timestamp, attempt) if stamp is not None]
    wall = (stamps[-1] - started).total_seconds() if started and stamps else None
    return Timing(started, wall, len(starts))


@dataclass(frozen=True)
class RunData:
    """Everything a report or a run listing shows, read once from a run directory."""

    path: Path
    recipe: str | None
    config: dict[str, Any]
    rows: list[dict[str, Any]]
    events: list[dict[str, Any]]
    checkpoints: list[CheckpointRecord]
    status: RunStatus
    timing: Timing
    last_write: float | None
    bad_lines: dict[str, int] = field(default_factory=dict)
    config_problem: str | None = None
    """Why config.yaml could not be read (not UTF-8, invalid or refused YAML); None when it was."""

    @property
    def steps_done(self) -> int:
        """Optimizer steps completed: the last metrics row's step + 1, or the last checkpoint's."""
        from_rows = int(self.rows[-1]["step"]) + 1 if self.rows else 0
        from_checkpoints = max((record.step for record in self.checkpoints), default=0)
        return max(from_rows, from_checkpoints)

    @property
    def stage_names(self) -> list[str]:
        """The workflow's stages (its `run.start` event lists them), or, for a run that predates that,
        those seen in `stage.end` events, in first-seen order: which `time/` keys are stages."""
        names: dict[str, None] = {}
        for event in self.events:
            if event.get("event") == "run.start" and isinstance(event.get("stages"), list):
                names.update((str(name), None) for name in event["stages"])
            elif event.get("event") == "stage.end":
                names[str(event["stage"])] = None
        return list(names)

    def notable_events(self) -> list[dict[str, Any]]:
        """Warnings and errors of the run, oldest first."""
        return [event for event in self.events if event.get("level") in ("warning", "error", "critical")]


def is_run_dir(path: Path) -> bool:
    files = RunDir(path)
    return path.is_dir() and any(p.is_file() for p in (files.config, files.metrics, files.events))


def _read_config(path: Path) -> tuple[dict[str, Any], str | None]:
    """The run's config and, when it cannot be read, why (a missing file is no problem)."""
    if not path.is_file():
        return {}, None
    try:
        data = load_yaml(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        return {}, f"cannot be read: {exc.strerror}"
    except UnicodeDecodeError as exc:
        return {}, f"not UTF-8 text (byte offset {exc.start})"
    except yaml.YAMLError as exc:
        return {}, f"invalid YAML: {getattr(exc, 'problem', None) or exc}"
    if not isinstance(data, dict):
        return {}, "the top level is not a mapping"
    return data, None


def _read_checkpoints(path: Path) -> tuple[list[CheckpointRecord], int]:
    raw = read_jsonl(path)
    records: list[CheckpointRecord] = []
    bad = raw.bad_lines
    for record in raw.records:
        try:
            records.append(CheckpointRecord.from_dict(record))
        except (KeyError, TypeError, ValueError):
            bad += 1
    return records, bad


def load_run(path: Path, now: float) -> RunData:
    """Read a run directory; `now` (epoch seconds) tells a running run from an interrupted one."""
    if not is_run_dir(path):
        raise KitchenError(f"{path} is not a run directory (no config.yaml, metrics.jsonl or events.jsonl)")
    files = RunDir(path)
    metrics = read_jsonl(files.metrics)
    events = read_jsonl(files.events)
    checkpoints, bad_checkpoints = _read_checkpoints(files.checkpoints)
    mtimes = [p.stat().st_mtime for p in (files.config, files.metrics, files.events, files.checkpoints) if p.is_file()]
    last_write = max(mtimes) if mtimes else None
    recipe = next((str(e["recipe"]) for e in events.records if isinstance(e.get("recipe"), str)), None)
    config, config_problem = _read_config(files.config)
    bad = {"metrics.jsonl": metrics.bad_lines, "events.jsonl": events.bad_lines, "checkpoints.jsonl": bad_checkpoints}
    return RunData(
        path=path,
        recipe=recipe,
        config=config,
        rows=merge_metric_rows(metrics.records),
        events=events.records,
        checkpoints=checkpoints,
        status=run_status(events.records, None if last_write is None else now - last_write),
        timing=run_timing(events.records),
        last_write=last_write,
        bad_lines={name: count for name, count in bad.items() if count},
        config_problem=config_problem,
    )
