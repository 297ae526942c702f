"""Server-side futures: every request the SDK submits gets a request id at once, and its result is
fetched later through `/retrieve_future`.

A request id is derived from what identifies the request to the SDK (training model + `seq_id`,
sampling session + `seq_id`, session + model number), so a request the SDK resubmits after a
lost answer (it retries on 5xx and connection errors) finds the first one's entry: it runs once
and both submissions get the same result. Waiting is a long poll: `/retrieve_future` holds the
connection until the result is there or `long_poll_s` passes, then answers `try_again`, so slow
work (big models) never turns into a client timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

ErrorCategory = Literal["user", "server", "unknown"]


@dataclass(frozen=True)
class Outcome:
    """A finished request: a protobuf or JSON payload, or an error the SDK raises as RequestFailedError."""

    proto: bytes | None = None
    json: dict[str, Any] | None = None
    error: str | None = None
    category: ErrorCategory = "user"


@dataclass
class Entry:
    owner: str
    future: asyncio.Future[Outcome]
    created: float
    label: str = "request"
    submitted: float = 0.0
    """Wall-clock time of the submission (epoch seconds), for the session's trace."""
    finished: float | None = None


FinishHook = Callable[[str, Entry, Outcome], None]
"""Told of every request once its outcome is set: (request id, entry, outcome)."""


class FutureBook:
    """Request id -> pending or finished outcome, per owner; finished entries expire after `keep_s`."""

    def __init__(self, keep_s: float = 3600.0, on_finish: FinishHook | None = None) -> None:
        self._entries: dict[str, Entry] = {}
        self._finished: deque[tuple[float, str]] = deque()
        """(finish time, request id) in finishing order: the oldest expire first, so expiring
        never walks the entries (one request's cost stays flat however many are kept)."""
        self._keep_s = keep_s
        self._on_finish = on_finish

    def get(self, request_id: str, owner: str) -> Entry | None:
        entry = self._entries.get(request_id)
        return entry if entry is not None and entry.owner == owner else None

    def start(self, request_id: str, owner: str, label: str = "request") -> tuple[Entry, bool]:
        """The entry for `request_id` and whether it is new (False: a resubmission); `label`
        names the kind of request in the session's trace."""
        existing = self._entries.get(request_id)
        if existing is not None:
            return existing, False
        self._expire()
        entry = Entry(owner, asyncio.get_running_loop().create_future(), time.monotonic(), label, time.time())
        self._entries[request_id] = entry
        return entry, True

    def finish(self, request_id: str, outcome: Outcome) -> None:
        entry = self._entries.get(request_id)
        if entry is not None and not entry.future.done():
            entry.future.set_result(outcome)
            entry.finished = time.monotonic()
            self._finished.append((entry.finished, request_id))
            if self._on_finish is not None:
                self._on_finish(request_id, entry, outcome)

    def run(
        self, request_id: str, work: Callable[[], Awaitable[Outcome]], describe: Callable[[BaseException], Outcome]
    ) -> None:
        """Finish `request_id` with what `work` returns, or with `describe(exception)`."""

        async def go() -> None:
            try:
                outcome = await work()
            except Exception as exc:
                outcome = describe(exc)
            self.finish(request_id, outcome)

        asyncio.get_running_loop().create_task(go())

    async def wait(self, entry: Entry, timeout_s: float) -> Outcome | None:
        """The outcome, or None when it is not there within `timeout_s` (the client asks again)."""
        try:
            return await asyncio.wait_for(asyncio.shield(entry.future), timeout_s)
        except TimeoutError:
            return None

    def _expire(self) -> None:
        now = time.monotonic()
        while self._finished and now - self._finished[0][0] > self._keep_s:
            self._entries.pop(self._finished.popleft()[1], None)


class Sequencer:
    """Runs one training model's requests in `seq_id` order, whatever order they arrive in.

    Each request's `submit` step (which queues it on the backend client and returns an awaitable
    of its result) runs only after every lower `seq_id` has been submitted; results are awaited
    concurrently, so the backend still pipelines. A `seq_id` already seen is not run again.
    """

    def __init__(self, first_seq_id: int = 1) -> None:
        self._next = first_seq_id
        self._waiting: dict[int, Callable[[], Awaitable[None]]] = {}
        self._seen: set[int] = set()
        self._lock = asyncio.Lock()

    def seen(self, seq_id: int) -> bool:
        return seq_id in self._seen or seq_id < self._next

    async def add(self, seq_id: int, submit: Callable[[], Awaitable[None]]) -> None:
        """Queue `submit` for `seq_id` and run every submission that is now in order."""
        self._seen.add(seq_id)
        self._waiting[seq_id] = submit
        async with self._lock:
            while self._next in self._waiting:
                step = self._waiting.pop(self._next)
                self._seen.discard(self._next)
                self._next += 1
                await step()
