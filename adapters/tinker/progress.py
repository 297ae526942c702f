"""Waiting on the Tinker service without going silent: progress lines while it retries, and a deadline.

The SDK retries failed requests by itself (5xx, connection errors, for minutes) and says nothing
while it does. `watched` awaits one SDK call and, every `progress_interval_s` without an answer,
logs what the service last answered (`retrying forward_backward: 503 Service Unavailable,
attempt 4, next in 8 s`); after `request_timeout_s` in all it gives up with a TimeoutError naming
the last answer. What the service answered is read from the HTTP client's own log records
(httpx logs every response; the SDK logs each retry's delay), captured by logger filters that
let through only what the loggers would have shown anyway.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

_RESPONSE = re.compile(r'^HTTP Request: \S+ \S+ "\S+ (?P<status>\d{3}) (?P<reason>[^"]*)"')
"""httpx's line for each response: `HTTP Request: POST URL "HTTP/1.1 503 Service Unavailable"`."""
_RETRY = re.compile(r"^Retrying request to \S+ in (?P<delay>[\d.]+) seconds")
"""The SDK's line for each retry it schedules."""

log = logging.getLogger("kitchen.tinker")


@dataclass
class _Observed:
    failures: int = 0
    last_failure: str | None = None
    last_failure_at: float = 0.0
    next_delay_s: float | None = None


class _ResponseWatch(logging.Filter):
    """Counts failed responses (status >= 400, or a retry the SDK schedules) as they are logged."""

    def __init__(self, shown_from: int) -> None:
        super().__init__()
        self.shown_from = shown_from
        self.observed = _Observed()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        # Read from the formatted message, never `record.args`: kitchen's secret redaction
        # (kitchen.engine.secrets) formats every record at creation and drops its args.
        message = record.getMessage()
        with self._lock:
            if response := _RESPONSE.match(message):
                if int(response["status"]) >= 400:
                    self.observed.failures += 1
                    self.observed.last_failure = f"{response['status']} {response['reason']}"
                    self.observed.last_failure_at = time.monotonic()
            elif retry := _RETRY.match(message):
                self.observed.next_delay_s = float(retry["delay"])
            elif message.startswith("Encountered httpx.TimeoutException"):
                self.observed.failures += 1
                self.observed.last_failure = "timed out"
                self.observed.last_failure_at = time.monotonic()
        return record.levelno >= self.shown_from

    def snapshot(self) -> _Observed:
        with self._lock:
            return _Observed(**vars(self.observed))


_WATCH: _ResponseWatch | None = None
_INSTALL = threading.Lock()


def _watch() -> _ResponseWatch:
    """The one response watch, installed on first use on the httpx and SDK client loggers."""
    global _WATCH
    with _INSTALL:
        if _WATCH is None:
            watch = _ResponseWatch(shown_from=logging.WARNING)
            for name in ("httpx", "tinker._base_client"):
                logger = logging.getLogger(name)
                watch.shown_from = min(watch.shown_from, logger.getEffectiveLevel())
                logger.addFilter(watch)
                logger.setLevel(logging.DEBUG)
            _WATCH = watch
        return _WATCH


async def watched(call: str, work: Awaitable[T], timeout_s: float, interval_s: float) -> T:
    """Await `work`, logging progress every `interval_s`; TimeoutError after `timeout_s` in all."""
    watch = _watch()
    start = time.monotonic()
    before = watch.snapshot().failures
    task = asyncio.ensure_future(work)
    try:
        while True:
            left = timeout_s - (time.monotonic() - start)
            if left <= 0:
                raise TimeoutError(_timeout_message(call, timeout_s, watch.snapshot(), before))
            done, _ = await asyncio.wait({task}, timeout=min(interval_s, left))
            if done:
                return task.result()
            _report(call, time.monotonic() - start, timeout_s, watch.snapshot(), before)
    finally:
        if not task.done():
            task.cancel()


def _report(call: str, elapsed_s: float, timeout_s: float, seen: _Observed, before: int) -> None:
    attempts = seen.failures - before
    if attempts > 0 and seen.last_failure is not None:
        delay = "" if seen.next_delay_s is None else f", next in {seen.next_delay_s:.0f} s"
        log.warning(
            f"retrying {call}: {seen.last_failure}, attempt {attempts + 1}{delay} "
            f"({elapsed_s:.0f} s so far; giving up after tinker.request_timeout_s={timeout_s:.0f} s)"
        )
    else:
        log.warning(
            f"waiting for {call}: no answer after {elapsed_s:.0f} s "
            f"(giving up after tinker.request_timeout_s={timeout_s:.0f} s)"
        )


def _timeout_message(call: str, timeout_s: float, seen: _Observed, before: int) -> str:
    attempts = seen.failures - before
    last = f"; the service's last answer: {seen.last_failure} ({attempts} failed attempts)" if attempts > 0 else ""
    return f"no result within tinker.request_timeout_s={timeout_s:.0f} s{last}"
