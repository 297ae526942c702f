"""Serve the requests made in one event-loop turn as batches, in one job on the worker thread.

Callers `submit` a request and await its own result. The requests of one loop turn (those of one
`asyncio.gather`, or of tasks woken together) are handed to the serial executor together, split
into batches, and their results come back together, so the tasks they wake also run in one turn
and their next requests batch again. One padded forward over B sequences costs far less than B
forwards of one.

Batches form from loop turns, never from how long the worker happened to be busy: which requests
share a batch is then a function of the program, not of timing. That keeps runs reproducible,
because a batched row differs from the same row alone in float rounding (~1e-7): attention over
a padded length rounds differently.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from adapters.local.serial_executor import SerialExecutor
from kitchen.engine.errors import ConfigError


@dataclass(frozen=True)
class BatchLimits:
    """How much one batched forward may hold, so memory stays bounded however many callers wait.

    `max_tokens` bounds the padded size: all rows times the longest row (for sampling, a row is
    the prompt plus its token budget: the KV cache it may grow). A request larger than the limits
    still runs, alone. `BatchLimits(max_sequences=1)` turns batching off.
    """

    max_sequences: int = 64
    max_tokens: int = 32768

    def __post_init__(self) -> None:
        for name in ("max_sequences", "max_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"batch limit {name} must be >= 1, got {getattr(self, name)}")


DEFAULT_BATCH_LIMITS = BatchLimits()


class Batchable(Protocol):
    """What batching needs to know of a request to decide what may run with it."""

    @property
    def key(self) -> Hashable:
        """Requests with equal keys may share a batch."""
        ...

    @property
    def rows(self) -> int:
        """The sequences the request adds to a batch."""
        ...

    @property
    def length(self) -> int:
        """The tokens of each of its rows (a batch is padded to its longest row)."""
        ...


def split_batches(requests: Sequence[Batchable], limits: BatchLimits) -> list[list[int]]:
    """Indices of `requests` per batch: repeatedly the oldest request left and, in order, those
    with its key that fit the limits with it."""
    left = list(range(len(requests)))
    batches: list[list[int]] = []
    while left:
        key = requests[left[0]].key
        batch: list[int] = []
        rows = length = 0
        for index in left:
            request = requests[index]
            if request.key != key:
                continue
            grown_rows, grown_length = rows + request.rows, max(length, request.length)
            if batch and (grown_rows > limits.max_sequences or grown_rows * grown_length > limits.max_tokens):
                break
            batch.append(index)
            rows, length = grown_rows, grown_length
        batches.append(batch)
        taken = set(batch)
        left = [index for index in left if index not in taken]
    return batches


RequestT = TypeVar("RequestT", bound=Batchable)
ResultT = TypeVar("ResultT")
_Outcome = tuple[list["asyncio.Future[ResultT]"], list[ResultT] | Exception]
"""A batch's futures, and their results or the error that failed the batch."""


class TurnBatcher(Generic[RequestT, ResultT]):
    """Collects the requests of each event-loop turn; `_dispatch` has them served at the turn's end."""

    def __init__(self, limits: BatchLimits = DEFAULT_BATCH_LIMITS) -> None:
        self._limits = limits
        # The requests of the current turn of each loop using this batcher (usually one loop).
        self._turns: dict[asyncio.AbstractEventLoop, list[tuple[RequestT, asyncio.Future[ResultT]]]] = {}

    def submit(self, request: RequestT) -> asyncio.Future[ResultT]:
        """Queue `request` with the others of this loop turn; the future resolves to its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ResultT] = loop.create_future()
        turn = self._turns.get(loop)
        if turn is None:
            turn = self._turns[loop] = []
            loop.call_soon(self._hand_over, loop)
        turn.append((request, future))
        return future

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        self._dispatch(loop, self._turns.pop(loop))

    def _dispatch(self, loop: asyncio.AbstractEventLoop, turn: list[tuple[RequestT, asyncio.Future[ResultT]]]) -> None:
        """At the end of the turn (on the loop): have its requests served."""
        raise NotImplementedError


class RequestBatcher(TurnBatcher[RequestT, ResultT]):
    """Requests served in batches by `run_batch` (one result per request, in order)."""

    def __init__(
        self,
        executor: SerialExecutor,
        run_batch: Callable[[list[RequestT]], list[ResultT]],
        limits: BatchLimits = DEFAULT_BATCH_LIMITS,
    ) -> None:
        super().__init__(limits)
        self._executor = executor
        self._run_batch = run_batch

    def _dispatch(self, loop: asyncio.AbstractEventLoop, turn: list[tuple[RequestT, asyncio.Future[ResultT]]]) -> None:
        """Give the turn's requests to the worker as one job."""
        try:
            self._executor.run_soon(lambda: self._serve(loop, turn))
        except RuntimeError as error:  # the executor is shut down: nothing would ever serve them
            for _, future in turn:
                if not future.done():
                    future.set_exception(error)

    def _serve(self, loop: asyncio.AbstractEventLoop, turn: list[tuple[RequestT, asyncio.Future[ResultT]]]) -> None:
        """The worker's job: run the turn's batches, then deliver every outcome in one callback."""
        live = [entry for entry in turn if not entry[1].cancelled()]  # a caller that gave up is not run
        outcomes: list[_Outcome[ResultT]] = []
        for batch in split_batches([request for request, _ in live], self._limits):
            futures = [live[index][1] for index in batch]
            try:
                outcomes.append((futures, self._run_batch([live[index][0] for index in batch])))
            except Exception as error:  # every caller in the batch sees the failure
                outcomes.append((futures, error))
        with contextlib.suppress(RuntimeError):  # raised when the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_deliver, outcomes)


def _deliver(outcomes: list[_Outcome[ResultT]]) -> None:
    for futures, results in outcomes:
        for index, future in enumerate(futures):
            if future.done():  # cancelled while its batch ran
                continue
            if isinstance(results, Exception):
                future.set_exception(results)
            else:
                future.set_result(results[index])
