"""One worker thread that runs submitted jobs strictly in submission order.

Submitting returns an asyncio future at once, so the event loop stays free (for concurrent
rollouts) while the model computes; the single thread is what gives Tinker's ordering guarantee.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class SerialExecutor:
    """A FIFO queue of jobs served by one thread."""

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    def submit(self, job: Callable[[], T]) -> asyncio.Future[T]:
        """Queue `job`; the returned future (bound to the running loop) resolves to its result."""
        return asyncio.wrap_future(self._pool.submit(job))

    def call(self, job: Callable[[], T]) -> T:
        """Run `job` in turn and wait for its result, from another thread (never from this
        executor's own, which would wait for itself)."""
        return self._pool.submit(job).result()

    def run_soon(self, job: Callable[[], None]) -> None:
        """Queue `job`, which hands out its own results: there is nothing to await."""
        self._pool.submit(job)

    def shutdown(self) -> None:
        """Finish queued jobs, then stop the thread."""
        self._pool.shutdown(wait=True)
