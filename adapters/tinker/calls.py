"""How an SDK call becomes a kitchen result: submitted at once, awaited later, errors named.

`submit` calls the SDK right away, so the SDK fixes the request's place in line (requests run
in submission order), and returns an asyncio task for the converted result: futures stay
futures, which is what lets callers pipeline. `open_remote` is for client-creating calls,
which may block while the SDK opens its session, so they run on a thread of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

from adapters.tinker.errors import raise_call_error
from adapters.tinker.progress import watched
from adapters.tinker.redaction import Redactor
from adapters.tinker.retry import RetryPolicy, is_sdk_failure
from adapters.tinker.sdk_surface import SdkFuture

R = TypeVar("R")
T = TypeVar("T")


async def resolve(
    call: str, future: SdkFuture[R], convert: Callable[[R], T], redactor: Redactor, policy: RetryPolicy
) -> T:
    """Await an SDK future (with progress lines and the deadline) and convert its result; a
    failure raises a TinkerCallError naming the call."""
    try:
        result = await watched(call, future.result_async(), policy.request_timeout_s, policy.progress_interval_s)
    except Exception as exc:
        if not is_sdk_failure(exc):
            raise
        raise_call_error(call, exc, redactor)
    return convert(result)


def submit(
    call: str, start: Callable[[], SdkFuture[R]], convert: Callable[[R], T], redactor: Redactor, policy: RetryPolicy
) -> asyncio.Task[T]:
    """Submit now and return a task for the converted result."""
    try:
        future = start()
    except Exception as exc:
        if not is_sdk_failure(exc):
            raise
        raise_call_error(call, exc, redactor)
    return asyncio.get_running_loop().create_task(resolve(call, future, convert, redactor, policy))


def _in_daemon_thread(start: Callable[[], T]) -> asyncio.Future[T]:
    """`start()` on a daemon thread: unlike `asyncio.to_thread`, a call the SDK keeps retrying
    after the deadline has given up on it does not hold up the event loop's shutdown."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future[T] = loop.create_future()

    def deliver(value: T | None, error: BaseException | None) -> None:
        if result.done():
            return
        if error is not None:
            result.set_exception(error)
        else:
            result.set_result(value)  # type: ignore[arg-type]

    def run() -> None:
        try:
            value, error = start(), None
        except BaseException as exc:
            value, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
            loop.call_soon_threadsafe(deliver, value, error)

    threading.Thread(target=run, daemon=True, name="tinker-open").start()
    return result


async def open_remote(call: str, start: Callable[[], SdkFuture[R]], policy: RetryPolicy) -> R:
    """Run a client-creating SDK call off the event loop and await its future, within the
    deadline and with progress lines (errors raw, for `with_retries` to classify)."""

    async def both() -> R:
        future = await _in_daemon_thread(start)
        return await future.result_async()

    return await watched(call, both(), policy.request_timeout_s, policy.progress_interval_s)
