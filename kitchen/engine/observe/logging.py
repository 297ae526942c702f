"""structlog setup for a run: JSON events to `events.jsonl`, and warnings+ to stderr.

Events are buffered: the file is flushed at every step end (`flush_events`, called by the
runner), at once for warnings and errors (so a failure's `run.failed` and everything before it are
on disk when it is logged), on close, at interpreter exit and on SIGTERM (`handle_sigterm`).
Without an events file, events below the console level are dropped before any processing.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import signal
import sys
import threading
import weakref
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import structlog

from kitchen.engine import secrets

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_OPEN_SINKS: weakref.WeakSet[_RunSink] = weakref.WeakSet()


class _RunSink:
    """A structlog processor chain end: appends each event as one JSON line, echoes important ones."""

    def __init__(self, events_path: Path | None, console: TextIO | None, console_level: str) -> None:
        self._file = events_path.open("a", encoding="utf-8", buffering=1 << 16) if events_path else None
        self._console = console
        self._console_level = _LEVELS[console_level]
        self.write_error: OSError | None = None
        self._lock = threading.Lock()  # events may come from worker threads
        _OPEN_SINKS.add(self)

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
        level = _LEVELS.get(event_dict.get("level", "info"), 20)
        if self._file is not None:
            line = json.dumps(event_dict, default=str) + "\n"
            with self._lock:
                try:
                    self._file.write(line)
                    if level >= _LEVELS["warning"]:
                        self._file.flush()
                except OSError as exc:  # a full or read-only disk must not hide the run's own error
                    self.write_error = exc
                    self._file = None
        if self._console is not None and level >= self._console_level:
            fields = " ".join(f"{k}={v}" for k, v in event_dict.items() if k not in ("event", "level", "timestamp"))
            print(
                f"[{event_dict.get('level', 'info')}] {event_dict.get('event')} {fields}".rstrip(),
                file=self._console,
                flush=True,
            )
        raise structlog.DropEvent

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                with contextlib.suppress(OSError):
                    self._file.close()
                self._file = None
        _OPEN_SINKS.discard(self)


def flush_events() -> None:
    """Write every open run's buffered events to disk."""
    for sink in list(_OPEN_SINKS):
        sink.flush()


atexit.register(flush_events)


@contextmanager
def handle_sigterm() -> Iterator[None]:
    """While inside: on SIGTERM, flush buffered events, then die of the signal as before.

    A no-op outside the main thread (only it may install handlers).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        flush_events()
        signal.signal(signal.SIGTERM, previous)
        if callable(previous):
            previous(signum, frame)
        else:
            signal.raise_signal(signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def make_run_logger(events_path: Path | None, console_level: str = "warning", **context: Any) -> tuple[Any, _RunSink]:
    # The run's config and environment are in force now: read the secret values once, here, rather
    # than per event (`secrets.structlog_processor` uses this set).
    secrets.refresh_secrets()
    sink = _RunSink(events_path, sys.stderr, console_level)
    # Nobody reads debug events without a file: drop them (and lower ones) before any processing.
    min_level = _LEVELS["debug"] if events_path is not None else _LEVELS[console_level]
    logger = structlog.wrap_logger(
        None,
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            secrets.structlog_processor,
            sink,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(min_level),
        context_class=dict,
    )
    return logger.bind(**context), sink
