"""structlog setup for a run: JSON events to `events.jsonl`, and warnings+ to stderr."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, TextIO

import structlog

from kitchen import secrets

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}


class _RunSink:
    """A structlog processor chain end: appends each event as one JSON line, echoes important ones."""

    def __init__(self, events_path: Path | None, console: TextIO | None, console_level: str) -> None:
        self._file = events_path.open("a", encoding="utf-8") if events_path else None
        self._console = console
        self._console_level = _LEVELS[console_level]
        self.write_error: OSError | None = None

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
        if self._file is not None:
            try:
                self._file.write(json.dumps(event_dict, default=str) + "\n")
                self._file.flush()
            except OSError as exc:  # a full or read-only disk must not hide the run's own error
                self.write_error = exc
                self._file = None
        if self._console is not None and _LEVELS.get(event_dict.get("level", "info"), 20) >= self._console_level:
            fields = " ".join(f"{k}={v}" for k, v in event_dict.items() if k not in ("event", "level", "timestamp"))
            print(
                f"[{event_dict.get('level', 'info')}] {event_dict.get('event')} {fields}".rstrip(),
                file=self._console,
                flush=True,
            )
        raise structlog.DropEvent

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


def make_run_logger(events_path: Path | None, console_level: str = "warning", **context: Any) -> tuple[Any, _RunSink]:
    sink = _RunSink(events_path, sys.stderr, console_level)
    logger = structlog.wrap_logger(
        None,
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            secrets.structlog_processor,
            sink,
        ],
        context_class=dict,
    )
    return logger.bind(**context), sink
