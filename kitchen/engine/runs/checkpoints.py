"""Checkpoint records: one JSON object per line in `checkpoints.jsonl`, appended atomically."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kitchen.engine.errors import ConfigError


@dataclass(frozen=True)
class CheckpointRecord:
    """Where a run was when it saved: enough to resume exactly.

    `step` counts completed optimizer steps; `loops` holds the positions of the loops that were
    running (outer to inner) when the last completed step ended; `state` holds persisted run
    state. `state_path` (weights + optimizer) makes a record resumable; `sampler_path` holds
    sampler weights.
    """

    name: str
    step: int
    loops: dict[str, int] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    state_path: str | None = None
    sampler_path: str | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    """The settings that define what was trained (`kitchen.engine.runs.rundir.fingerprint`); a resume with
    different ones is refused. Empty in records written before fingerprints."""
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Size and sha256 of each checkpoint file on this machine (path relative to the run dir),
    verified before the checkpoint is used. Empty for remote checkpoints and old records."""
    final: bool = False
    """Written by the final save of a finished run."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckpointRecord:
        return cls(
            name=str(data["name"]),
            step=int(data.get("step", 0)),
            loops={str(k): int(v) for k, v in dict(data.get("loops", {})).items()},
            state=dict(data.get("state", {})),
            state_path=data.get("state_path"),
            sampler_path=data.get("sampler_path"),
            fingerprint=dict(data.get("fingerprint") or {}),
            files={str(k): dict(v) for k, v in dict(data.get("files") or {}).items()},
            final=bool(data.get("final", data["name"] == "final")),
        )


def append_record(path: Path, record: CheckpointRecord) -> None:
    """Append one line with a single write + fsync, so a crash never leaves half a record."""
    line = (record.to_json() + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def read_records(path: Path) -> list[CheckpointRecord]:
    """All complete records; a torn last line (crash mid-write) is ignored."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(CheckpointRecord.from_dict(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, RecursionError):
            continue
    return records


def last_resumable(path: Path) -> CheckpointRecord | None:
    """The last record with a `state_path`: the point a rerun resumes from."""
    for record in reversed(read_records(path)):
        if record.state_path:
            return record
    return None


def resolve_sampler_path(path: str) -> str:
    """Sampler weights to load from `path`: a run directory gives its last checkpoint's sampler
    weights; anything else (a checkpoint path, local or `tinker://`) is used as it is."""
    records_file = Path(path) / "checkpoints.jsonl"
    if "://" in path or not records_file.is_file():
        return path
    with_sampler = [record for record in read_records(records_file) if record.sampler_path]
    if not with_sampler:
        raise ConfigError(f"run directory {path} has no checkpoint with sampler weights yet")
    return str(with_sampler[-1].sampler_path)


def resolve_state_path(path: str) -> str:
    """Training state (weights + optimizer) to start from `path`: a run directory gives its last
    resumable checkpoint's `state_path`; anything else is used as it is."""
    records_file = Path(path) / "checkpoints.jsonl"
    if "://" in path or not records_file.is_file():
        return path
    record = last_resumable(records_file)
    if record is None or record.state_path is None:
        raise ConfigError(f"run directory {path} has no checkpoint with training state yet")
    return record.state_path


def finished(path: Path) -> bool:
    """Whether the run directory `path` holds a final checkpoint (the run completed)."""
    return any(record.name == "final" for record in read_records(path / "checkpoints.jsonl"))
