"""SharedWorker: several clients' lanes on one thread, each lane's jobs in order, and the waiting
batchable jobs of different lanes run as one batch whose results go back to their own callers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from adapters.local.request_batcher import BatchLimits
from adapters.local.shared_worker import Lane, SharedWorker


@dataclass(frozen=True)
class Job:
    ident: str
    log: list[str] = field(compare=False)
    key: str = "k"
    rows: int = 1
    length: int = 1

    def run_alone(self) -> str:
        self.log.append(self.ident)
        return f"alone {self.ident}"


class Batches:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.batches: list[list[str]] = []

    def __call__(self, jobs: list[Job]) -> list[str]:
        if any(job.ident == "bad" for job in jobs):
            raise ValueError("a bad batch")
        self.batches.append([job.ident for job in jobs])
        self.log.extend(job.ident for job in jobs)
        return [f"batched {job.ident}" for job in jobs]


@pytest.fixture
def log() -> list[str]:
    return []


@pytest.fixture
def batches(log: list[str]) -> Batches:
    return Batches(log)


@pytest.fixture
def worker(batches: Batches) -> Iterator[SharedWorker]:
    shared = SharedWorker("test-shared", batches, BatchLimits(max_sequences=3, max_tokens=100))
    yield shared
    shared.shutdown()


def _blocked(lane: Lane, gate: threading.Event, log: list[str]) -> asyncio.Future[None]:
    """A job that holds the worker until `gate` is set, so that what follows waits together."""

    def hold() -> None:
        gate.wait(30)
        log.append("gate")

    return lane.submit(hold)


def test_waiting_jobs_of_different_lanes_run_as_one_batch(
    worker: SharedWorker, batches: Batches, log: list[str]
) -> None:
    async def main() -> list[str]:
        gate = threading.Event()
        lanes = [worker.lane() for _ in range(4)]
        held = _blocked(lanes[0], gate, log)
        futures = [lanes[k].submit_batchable(Job(f"j{k}", log)) for k in range(1, 4)]
        gate.set()
        await held
        return list(await asyncio.gather(*futures))

    assert asyncio.run(main()) == ["batched j1", "batched j2", "batched j3"]
    assert batches.batches == [["j1", "j2", "j3"]]
    assert worker.batches == [1, 3]


def test_a_lane_jobs_never_pass_each_other(worker: SharedWorker, batches: Batches, log: list[str]) -> None:
    """Lane b's batchable job waits behind its own earlier plain job, so it does not join lane c's
    batch; lane a's two batchable jobs never share a batch."""

    async def main() -> None:
        gate = threading.Event()
        a, b, c = worker.lane(), worker.lane(), worker.lane()
        held = _blocked(a, gate, log)
        first = a.submit_batchable(Job("a1", log))
        second = a.submit_batchable(Job("a2", log))
        plain = b.submit(lambda: log.append("b-plain"))
        later = b.submit_batchable(Job("b1", log))
        other = c.submit_batchable(Job("c1", log))
        gate.set()
        await asyncio.gather(held, first, second, plain, later, other)

    asyncio.run(main())
    assert log.index("a1") < log.index("a2") and log.index("b-plain") < log.index("b1")
    assert ["a1", "c1"] in batches.batches
    assert all(not {"a1", "a2"} <= set(batch) for batch in batches.batches)


def test_only_jobs_with_the_first_ones_key_within_the_limits_join_it(
    worker: SharedWorker, batches: Batches, log: list[str]
) -> None:
    async def main() -> None:
        gate = threading.Event()
        lanes = [worker.lane() for _ in range(6)]
        held = _blocked(lanes[0], gate, log)
        futures = [
            lanes[1].submit_batchable(Job("x1", log)),
            lanes[2].submit_batchable(Job("y1", log, key="other")),
            lanes[3].submit_batchable(Job("x2", log, length=200)),  # too long for max_tokens
            lanes[4].submit_batchable(Job("x3", log)),
            lanes[5].submit_batchable(Job("x4", log, rows=2)),  # 4 rows: beyond max_sequences
        ]
        gate.set()
        await asyncio.gather(held, *futures)

    asyncio.run(main())
    assert batches.batches[0] == ["x1", "x3"]
    assert sorted(log) == sorted(["gate", "x1", "x2", "x3", "x4", "y1"])  # every job ran once


def test_a_failing_batch_fails_each_of_its_jobs_and_nothing_else(worker: SharedWorker, log: list[str]) -> None:
    async def main() -> list[object]:
        gate = threading.Event()
        lanes = [worker.lane() for _ in range(4)]
        held = _blocked(lanes[0], gate, log)
        futures = [lanes[1].submit_batchable(Job("ok", log)), lanes[2].submit_batchable(Job("bad", log))]
        after = lanes[3].submit(lambda: "after")
        gate.set()
        await held
        return list(await asyncio.gather(*futures, after, return_exceptions=True))

    outcomes = asyncio.run(main())
    assert [type(o) for o in outcomes[:2]] == [ValueError, ValueError]
    assert outcomes[2] == "after"


def test_a_lane_shuts_down_once_its_own_jobs_have_run(worker: SharedWorker, log: list[str]) -> None:
    lane = worker.lane()
    gate = threading.Event()

    async def main() -> None:
        lane.submit(lambda: gate.wait(30))
        lane.submit(lambda: log.append("last"))

    asyncio.run(main())
    stopper = threading.Thread(target=lane.shutdown)
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive()  # its jobs are still queued
    gate.set()
    stopper.join(30)
    assert not stopper.is_alive() and log == ["last"]


def test_a_shut_down_worker_refuses_new_jobs(worker: SharedWorker) -> None:
    lane = worker.lane()
    worker.shutdown()

    async def main() -> None:
        lane.submit(lambda: None)

    with pytest.raises(RuntimeError, match="shut down"):
        asyncio.run(main())


def test_a_batch_waits_for_the_lanes_training_in_step(batches: Batches, log: list[str]) -> None:
    """Lane b ran a batchable job a moment ago: a's next one waits for b's next (which comes within
    the window), and the two run as one batch; a lane whose client has gone is not waited for."""
    worker = SharedWorker("test-window", batches, BatchLimits(max_sequences=3, max_tokens=100), window_s=60.0)

    async def main() -> None:
        a, b = worker.lane(), worker.lane()
        gate = threading.Event()
        held = _blocked(a, gate, log)
        first = [a.submit_batchable(Job("a1", log)), b.submit_batchable(Job("b1", log))]
        gate.set()
        await asyncio.gather(held, *first)
        step = a.submit_batchable(Job("a2", log))
        await asyncio.sleep(0.05)  # the worker has taken a2 and waits for b
        await asyncio.gather(step, b.submit_batchable(Job("b2", log)))
        await asyncio.to_thread(b.shutdown)
        await asyncio.wait_for(a.submit_batchable(Job("a3", log)), timeout=30)  # b is gone: no 60 s wait

    try:
        asyncio.run(main())
    finally:
        worker.shutdown()
    assert batches.batches == [["a1", "b1"], ["a2", "b2"]]
    assert log[-1] == "a3"
