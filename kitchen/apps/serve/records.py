"""What `kitchen serve` keeps on disk: sessions, training runs and checkpoints, per API key.

The records live in one JSON file under the store folder, rewritten atomically (temp file, fsync,
rename) on every change, so a server killed with `kill -9` restarts with every run and checkpoint
it had acknowledged. The weights themselves are the backend's checkpoint files under
`<store>/checkpoints` (external exports under `<store>/external`); a record maps the `tinker://`
path a client sees to the backend's own path. Records written by an older server load with the
newer fields at their defaults.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

CheckpointType = Literal["training", "sampler", "external"]
TINKER_SCHEME = "tinker://"
_SEGMENT = {"training": "weights", "sampler": "sampler_weights", "external": "external_weights"}
DEFAULT_PROJECT = "default"
"""The project of a session created without one (the service puts every session in a project)."""


@dataclass
class SessionRecord:
    session_id: str
    owner: str
    created: float
    finished: str | None = None
    user_metadata: dict[str, str] | None = None
    project_id: str = DEFAULT_PROJECT
    display_name: str | None = None


@dataclass
class RunRecord:
    """A training run (the SDK's "model"), named by the model id the server gave it."""

    training_run_id: str
    owner: str
    session_id: str
    base_model: str
    lora_rank: int | None
    created: float
    last_request_time: float
    user_metadata: dict[str, Any] | None = None
    layers: dict[str, bool] | None = None
    """The LoRA layer choice it was created with (train_attn, train_mlp, train_unembed)."""
    copy_of: str | None = None
    """For a run made by copy_weights: the checkpoint it holds a copy of (it cannot be trained)."""


@dataclass
class CheckpointRecord:
    tinker_path: str
    training_run_id: str
    checkpoint_type: CheckpointType
    name: str
    backend_path: str
    owner: str
    time: float
    user_metadata: dict[str, str] | None = None
    public: bool = False
    expires_at: float | None = None
    """Epoch seconds after which the checkpoint is gone (None: never)."""

    @property
    def checkpoint_id(self) -> str:
        return f"{_SEGMENT[self.checkpoint_type]}/{self.name}"


def tinker_path(training_run_id: str, kind: CheckpointType, name: str) -> str:
    return f"{TINKER_SCHEME}{training_run_id}/{_SEGMENT[kind]}/{name}"


MAX_EVENTS = 10_000
"""Audit events kept (the oldest are dropped past it)."""


@dataclass
class Records:
    sessions: dict[str, SessionRecord] = field(default_factory=dict)
    runs: dict[str, RunRecord] = field(default_factory=dict)
    checkpoints: dict[str, CheckpointRecord] = field(default_factory=dict)
    copies: dict[str, str] = field(default_factory=dict)
    """`copy_weights` requests by owner and idempotency key -> the copy's path (a retry gets it again)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """The checkpoint events of the audit log: time, event, owner, tinker_path and details."""


class RecordStore:
    """The records of one store folder; every mutation is written before it returns."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.checkpoint_dir = folder / "checkpoints"
        self.tokenizer_dir = folder / "tokenizers"
        self._file = folder / "records.json"
        self._lock = threading.Lock()
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.data = self._read()

    def _read(self) -> Records:
        if not self._file.exists():
            return Records()
        raw = json.loads(self._file.read_text(encoding="utf-8"))
        return Records(
            {k: SessionRecord(**v) for k, v in raw.get("sessions", {}).items()},
            {k: RunRecord(**v) for k, v in raw.get("runs", {}).items()},
            {k: CheckpointRecord(**v) for k, v in raw.get("checkpoints", {}).items()},
            dict(raw.get("copies", {})),
            list(raw.get("events", [])),
        )

    def save(self) -> None:
        """Write the records atomically: a reader (or a restart) sees the old file or the new one."""
        with self._lock:
            payload = {
                "sessions": {k: asdict(v) for k, v in self.data.sessions.items()},
                "runs": {k: asdict(v) for k, v in self.data.runs.items()},
                "checkpoints": {k: asdict(v) for k, v in self.data.checkpoints.items()},
                "copies": self.data.copies,
                "events": self.data.events,
            }
            temp = self._file.with_suffix(".json.tmp")
            with open(temp, "w", encoding="utf-8") as handle:
                json.dump(payload, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self._file)

    def add_session(self, record: SessionRecord) -> None:
        self.data.sessions[record.session_id] = record
        self.save()

    def add_run(self, record: RunRecord) -> None:
        self.data.runs[record.training_run_id] = record
        self.save()

    def add_checkpoint(self, record: CheckpointRecord) -> None:
        self.data.checkpoints[record.tinker_path] = record
        self.save()

    def log_event(self, event: str, owner: str, tinker_path: str, **details: Any) -> None:
        """Append an audit event (and save)."""
        self.data.events.append(
            {"time": time.time(), "event": event, "owner": owner, "tinker_path": tinker_path, **details}
        )
        del self.data.events[:-MAX_EVENTS]
        self.save()

    def sharing(self, backend_path: str) -> list[CheckpointRecord]:
        """The checkpoints whose weights are the files at `backend_path` (copies share them)."""
        return [c for c in self.data.checkpoints.values() if c.backend_path == backend_path]

    def remove_checkpoint(self, path: str) -> CheckpointRecord | None:
        record = self.data.checkpoints.pop(path, None)
        if record is not None:
            self.save()
        return record

    def checkpoints_of(self, owner: str, training_run_id: str | None = None) -> list[CheckpointRecord]:
        found = [
            c
            for c in self.data.checkpoints.values()
            if c.owner == owner and (training_run_id is None or c.training_run_id == training_run_id)
        ]
        return sorted(found, key=lambda c: c.time)
