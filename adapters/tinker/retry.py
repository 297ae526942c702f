"""Retrying retryable service errors with backoff, on top of the SDK's own retries.

Where the SDK retries by itself it is configured, not duplicated: sampling clients get a
`RetryConfig` built from the policy, and training requests are retried inside the SDK (each
holds a sequence number, so re-submitting one from here would break submission order).
Client creation is retried here, up to `max_retries` times, for the errors the SDK itself
classes as retryable (connection errors, timeouts, HTTP 408/409/429/5xx).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from typing import TypeVar

import tinker
from tinker.lib.retry_handler import RetryConfig, is_retryable_status_code

from adapters.tinker.errors import raise_call_error
from adapters.tinker.progress import log
from adapters.tinker.redaction import Redactor
from kitchen.engine.errors import ConfigError

T = TypeVar("T")

SDK_ERRORS: tuple[type[Exception], ...] = (tinker.TinkerError, TimeoutError)
"""What a failed service request raises: the SDK's errors and its timeouts."""

_SDK_RETRYABLE = RetryConfig().retryable_exceptions


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to retry: attempts for client creation, backoff delays, the SDK's stall timeout."""

    max_retries: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 10.0
    progress_timeout_s: float = 7200.0
    request_timeout_s: float = 1800.0
    """Total deadline for one request, the SDK's own retries included (`tinker.request_timeout_s`)."""
    progress_interval_s: float = 30.0
    """How often a request still without an answer logs what the service last said."""

    def __post_init__(self) -> None:
        for field in fields(self):
            if getattr(self, field.name) < 0:
                raise ConfigError(f"tinker retry policy: {field.name} must be >= 0, got {getattr(self, field.name)}")

    def delay_s(self, attempt: int) -> float:
        """Exponential backoff before retry number `attempt + 1`, capped at `max_delay_s`."""
        return min(self.base_delay_s * 2**attempt, self.max_delay_s)

    def sdk_retry_config(self) -> RetryConfig:
        """The same backoff for the SDK's own retry handler (used by sampling clients)."""
        return RetryConfig(
            retry_delay_base=self.base_delay_s,
            retry_delay_max=self.max_delay_s,
            progress_timeout=self.progress_timeout_s,
        )


def is_sdk_failure(exc: BaseException) -> bool:
    """Whether `exc` is a failed service request: the SDK's errors, a timeout, or the `ValueError`
    the SDK raises when fetching a result gets a 4xx (its HTTP error is the `__cause__`)."""
    if isinstance(exc, SDK_ERRORS):
        return True
    return isinstance(exc, ValueError) and (
        isinstance(exc.__cause__, tinker.TinkerError) or str(exc).startswith("Error retrieving result")
    )


def is_retryable(exc: BaseException) -> bool:
    """The SDK's own classification: transport errors and timeouts, or a retryable HTTP status
    (for a failed result fetch, the status of the HTTP error behind it)."""
    if isinstance(exc, ValueError) and exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, _SDK_RETRYABLE):
        return True
    return isinstance(exc, tinker.APIStatusError) and is_retryable_status_code(exc.status_code)


async def with_retries(call: str, attempt: Callable[[], Awaitable[T]], policy: RetryPolicy, redactor: Redactor) -> T:
    """Run `attempt`, retrying retryable failures; a final failure raises a TinkerCallError."""
    failures = 0
    while True:
        try:
            return await attempt()
        except Exception as exc:
            if not is_sdk_failure(exc):
                raise
            failures += 1
            if failures > policy.max_retries or not is_retryable(exc):
                raise_call_error(call, exc, redactor, attempts=failures)
            delay = policy.delay_s(failures - 1)
            log.warning(f"retrying {call}: {describe(exc)}, attempt {failures + 1}, next in {delay:.0f} s")
            await asyncio.sleep(delay)


def describe(exc: BaseException) -> str:
    """A failure in a few words: the HTTP status where there is one."""
    cause = exc.__cause__ if isinstance(exc, ValueError) and exc.__cause__ is not None else exc
    if isinstance(cause, tinker.APIStatusError):
        return f"{cause.status_code}"
    return type(cause).__name__
