"""One worker thread for the jobs of several clients, each client's in submission order, with the
jobs of different clients that are waiting at the same time batched into one run.

The LoRA clients of one base model share it (`adapters.local.lora_group`): each has a `Lane`, its
own FIFO queue, and the worker serves the lanes' jobs in the order they were submitted overall.
When the job it takes next is batchable, it also takes the first waiting job of every other lane
that is batchable with it (same `key`, within the `BatchLimits`): those clients' requests arrived
while the worker was busy, and run through the shared base in one pass (`run_batch`). A client's
jobs never pass each other (only a lane's first job is ever taken early), so each client sees the
Tinker service's ordering; other clients' jobs only move earlier, which they cannot observe.

Which requests share a batch then depends on timing (what had arrived when the worker came free),
as on the Tinker service; a client alone on its base always runs alone, as a client of its own
`SerialExecutor` does, so single-client runs stay reproducible bit for bit. Several clients' runs
are reproducible to float rounding: a row's result in a larger batch differs by ~1e-7.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol

from adapters.local.request_batcher import BatchLimits, RequestT, ResultT, TurnBatcher, split_batches

BATCH_WINDOW_S = 0.02
"""How long a batch waits at most for the active lanes that have no job waiting yet: a request's
round trip through `kitchen serve` on 127.0.0.1, with room (a pass of the tiny model takes longer)."""

ACTIVE_S = 1.0
"""A lane that submitted a batchable job this recently is expected to submit the next soon."""


class BatchableJob(Protocol):
    """A job that may run in one batch with other lanes' jobs of the same key."""

    @property
    def key(self) -> Hashable: ...

    @property
    def rows(self) -> int: ...

    @property
    def length(self) -> int: ...

    def run_alone(self) -> Any:
        """Its result when it runs by itself."""
        ...


BatchRunner = Callable[[list[Any]], list[Any]]
"""Runs batchable jobs of different lanes together: one result per job, in order."""


@dataclass
class _Queued:
    lane: Lane
    job: Callable[[], Any] | BatchableJob
    future: Future[Any]
    batchable: bool


@dataclass
class SharedWorker:
    """The thread and the queue of all lanes' jobs (started on first use, stopped by `shutdown`)."""

    name: str
    run_batch: BatchRunner
    limits: BatchLimits
    _queue: deque[_Queued] = field(default_factory=deque)
    _ready: threading.Condition = field(default_factory=threading.Condition)
    _thread: threading.Thread | None = None
    _stopping: bool = False
    window_s: float = BATCH_WINDOW_S
    _active: dict[int, float] = field(default_factory=dict)
    """When each lane last submitted a batchable job (by lane id)."""
    batches: list[int] = field(default_factory=list)
    """The sizes of the batches run so far (how many lanes' jobs each held): for tests and benchmarks."""

    def lane(self) -> Lane:
        """A new client's queue."""
        return Lane(self)

    def put(self, entry: _Queued) -> None:
        with self._ready:
            if self._stopping:
                raise RuntimeError(f"{self.name}: the worker is shut down")
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
            self._queue.append(entry)
            if entry.batchable:
                self._active[id(entry.lane)] = time.monotonic()
            self._ready.notify()

    def _take(self) -> list[_Queued] | None:
        """The next job, and the jobs of other lanes batched with it; None once shut down. A
        batchable job waits up to `window_s` for the lanes that submitted batchable work within
        ACTIVE_S and have none waiting yet: the next requests of clients training in step, which
        arrive a round trip after their last results (without the wait, a batch of all of them
        splits into ever smaller ones)."""
        with self._ready:
            while not self._queue and not self._stopping:
                self._ready.wait()
            if not self._queue:
                return None
            first = self._queue.popleft()
            if not first.batchable:
                return [first]
            taken = [first]
            deadline = time.monotonic() + self.window_s
            while True:
                closed = self._join(taken)
                now = time.monotonic()
                active = {lane for lane, last in self._active.items() if now - last < ACTIVE_S}
                if not active - closed or now >= deadline or self._stopping:
                    return taken
                self._ready.wait(deadline - now)

    def _join(self, taken: list[_Queued]) -> set[int]:
        """Move the waiting jobs that fit into `taken` (each lane's first waiting job, batchable
        with the first, within the limits); the lanes that cannot join any more."""
        jobs: list[Any] = [entry.job for entry in taken]
        job, rows, length = jobs[0], sum(j.rows for j in jobs), max(j.length for j in jobs)
        closed = {id(entry.lane) for entry in taken}
        for entry in list(self._queue):
            if id(entry.lane) in closed:
                continue
            closed.add(id(entry.lane))  # only a lane's first waiting job may be taken early
            other: Any = entry.job
            if not entry.batchable or other.key != job.key:
                continue
            grown_rows, grown_length = rows + other.rows, max(length, other.length)
            if grown_rows > self.limits.max_sequences or grown_rows * grown_length > self.limits.max_tokens:
                continue
            rows, length = grown_rows, grown_length
            taken.append(entry)
            self._queue.remove(entry)
        if rows >= self.limits.max_sequences:
            closed |= set(self._active)  # full: nobody else can join
        return closed

    def _serve(self) -> None:
        while (taken := self._take()) is not None:
            live = [entry for entry in taken if entry.future.set_running_or_notify_cancel()]
            if not live:
                continue
            try:
                if len(live) == 1:
                    job: Any = live[0].job
                    results = [job.run_alone() if live[0].batchable else job()]
                else:
                    results = self.run_batch([entry.job for entry in live])
                self.batches.append(len(live))
            except BaseException as error:  # every job of the batch sees the failure
                for entry in live:
                    entry.future.set_exception(error)
                continue
            for entry, result in zip(live, results, strict=True):
                entry.future.set_result(result)

    def forget(self, lane: Lane) -> None:
        """`lane`'s client is gone: no batch waits for it."""
        with self._ready:
            self._active.pop(id(lane), None)

    def shutdown(self) -> None:
        """Finish the queued jobs, then stop the thread."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
            thread = self._thread
        if thread is not None:
            thread.join()


class Lane:
    """One client's queue on a shared worker (the interface of `SerialExecutor`, plus
    `submit_batchable`)."""

    def __init__(self, worker: SharedWorker) -> None:
        self._worker = worker
        self._pending: set[Future[Any]] = set()
        self._idle = threading.Condition()

    def _put(self, job: Callable[[], Any] | BatchableJob, batchable: bool) -> Future[Any]:
        future: Future[Any] = Future()
        with self._idle:
            self._pending.add(future)
        future.add_done_callback(self._done)
        try:
            self._worker.put(_Queued(self, job, future, batchable))
        except RuntimeError:
            future.cancel()  # never queued: nothing to wait for
            raise
        return future

    def _done(self, future: Future[Any]) -> None:
        with self._idle:
            self._pending.discard(future)
            self._idle.notify_all()

    def submit(self, job: Callable[[], Any]) -> asyncio.Future[Any]:
        """Queue `job` behind this lane's earlier jobs; the returned future (bound to the running
        loop) resolves to its result."""
        return asyncio.wrap_future(self._put(job, batchable=False))

    def submit_batchable(self, job: BatchableJob) -> asyncio.Future[Any]:
        """As `submit`, for a job that may run in one batch with other lanes' waiting jobs."""
        return asyncio.wrap_future(self._put(job, batchable=True))

    def shutdown(self) -> None:
        """Wait until this lane's queued jobs have run (the worker serves other lanes on)."""
        with self._idle:
            while self._pending:
                self._idle.wait()
        self._worker.forget(self)


class LaneBatcher(TurnBatcher[RequestT, ResultT], Generic[RequestT, ResultT]):
    """A client's requests of one loop turn, batched as a `RequestBatcher` batches them, each batch
    then queued on the client's lane as one batchable job (`make_job`, whose result is one result
    per request): the worker may run it in one pass with other lanes' waiting batches."""

    def __init__(self, lane: Lane, make_job: Callable[[list[RequestT]], BatchableJob], limits: BatchLimits) -> None:
        super().__init__(limits)
        self._lane = lane
        self._make_job = make_job

    def _dispatch(self, loop: asyncio.AbstractEventLoop, turn: list[tuple[RequestT, asyncio.Future[ResultT]]]) -> None:
        requests = [request for request, _ in turn]
        for batch in split_batches(requests, self._limits):
            futures = [turn[index][1] for index in batch]
            try:
                job = self._lane.submit_batchable(self._make_job([requests[index] for index in batch]))
            except RuntimeError as error:  # the worker is shut down: nothing would ever serve them
                job = loop.create_future()
                job.set_exception(error)
            job.add_done_callback(functools.partial(_deliver_job, futures))


def _deliver_job(futures: list[asyncio.Future[Any]], job: asyncio.Future[list[Any]]) -> None:
    """Each request's result (or the job's failure) to its caller."""
    for index, future in enumerate(futures):
        if future.done():  # the caller gave up
            continue
        if job.cancelled():
            future.cancel()
        elif (error := job.exception()) is not None:
            future.set_exception(error)
        else:
            future.set_result(job.result()[index])
