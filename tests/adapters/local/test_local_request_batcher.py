"""RequestBatcher: the requests of one loop turn share batches, and every caller gets its own outcome."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.local.request_batcher import BatchLimits, RequestBatcher, split_batches
from adapters.local.serial_executor import SerialExecutor
from kitchen.engine.errors import ConfigError


@dataclass(frozen=True)
class Request:
    ident: int
    key: str = "k"
    rows: int = 1
    length: int = 1


class Recorder:
    """A batch function that records each batch (request ids) and answers each id times ten."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __call__(self, requests: list[Request]) -> list[int]:
        self.batches.append([r.ident for r in requests])
        return [10 * r.ident for r in requests]


@pytest.fixture
def executor() -> Iterator[SerialExecutor]:
    worker = SerialExecutor("test-batcher")
    yield worker
    worker.shutdown()


def _run_at_once(batcher: RequestBatcher[Request, int], requests: Sequence[Request]) -> list[int]:
    async def main() -> list[int]:
        return list(await asyncio.gather(*(batcher.submit(r) for r in requests)))

    return asyncio.run(main())


def test_requests_made_together_run_as_one_batch_and_each_gets_its_result(executor: SerialExecutor) -> None:
    recorder = Recorder()
    batcher = RequestBatcher(executor, recorder)
    assert _run_at_once(batcher, [Request(i) for i in range(5)]) == [0, 10, 20, 30, 40]
    assert recorder.batches == [[0, 1, 2, 3, 4]]


def test_only_requests_with_the_oldest_requests_key_join_its_batch(executor: SerialExecutor) -> None:
    recorder = Recorder()
    batcher = RequestBatcher(executor, recorder)
    keys = ["a", "b", "a", "b", "a"]
    assert _run_at_once(batcher, [Request(i, key) for i, key in enumerate(keys)]) == [0, 10, 20, 30, 40]
    assert recorder.batches == [[0, 2, 4], [1, 3]]


def test_limits_split_batches_and_an_oversized_request_runs_alone(executor: SerialExecutor) -> None:
    recorder = Recorder()
    batcher = RequestBatcher(executor, recorder, BatchLimits(max_sequences=4, max_tokens=40))
    requests = [
        Request(0, rows=2, length=5),
        Request(1, rows=2, length=5),  # 4 rows x 5 tokens: fits
        Request(2, rows=1, length=5),  # a fifth row: over max_sequences
        Request(3, rows=1, length=30),  # 2 rows x 30 tokens: over max_tokens
        Request(4, rows=9, length=50),  # over both on its own: runs alone
    ]
    _run_at_once(batcher, requests)
    assert recorder.batches == [[0, 1], [2], [3], [4]]


def test_each_turn_is_its_own_job_even_while_the_worker_is_busy(executor: SerialExecutor) -> None:
    """Requests of later turns do not join whatever happens to be queued: batches do not depend on timing."""
    started, release = threading.Event(), threading.Event()
    recorder = Recorder()

    def blocking(requests: list[Request]) -> list[int]:
        started.set()
        release.wait()
        return recorder(requests)

    batcher = RequestBatcher(executor, blocking)

    async def main() -> list[int]:
        first = batcher.submit(Request(0))
        await asyncio.to_thread(started.wait)
        second = [batcher.submit(Request(i)) for i in (1, 2)]
        await asyncio.sleep(0)
        third = batcher.submit(Request(3))
        release.set()
        return [await first, *await asyncio.gather(*second), await third]

    assert asyncio.run(main()) == [0, 10, 20, 30]
    assert recorder.batches == [[0], [1, 2], [3]]


def test_a_turns_results_arrive_together_so_the_callers_next_requests_batch_again(executor: SerialExecutor) -> None:
    recorder = Recorder()
    batcher = RequestBatcher(executor, recorder)

    async def two_requests(first: int) -> list[int]:
        return [await batcher.submit(Request(first)), await batcher.submit(Request(first + 4))]

    async def main() -> list[list[int]]:
        return list(await asyncio.gather(*(two_requests(i) for i in range(4))))

    for _ in range(20):
        recorder.batches.clear()
        assert asyncio.run(main()) == [[10 * i, 10 * (i + 4)] for i in range(4)]
        assert recorder.batches == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_a_failing_batch_fails_each_of_its_callers_and_the_next_batch_still_runs(executor: SerialExecutor) -> None:
    def fails_on_a(requests: list[Request]) -> list[int]:
        if requests[0].key == "a":
            raise ValueError(f"batch of {len(requests)} failed")
        return [r.ident for r in requests]

    batcher = RequestBatcher(executor, fails_on_a)

    async def main() -> list[int | BaseException]:
        requests = [Request(0, "a"), Request(1, "b"), Request(2, "a")]
        return list(await asyncio.gather(*(batcher.submit(r) for r in requests), return_exceptions=True))

    first, second, third = asyncio.run(main())
    assert isinstance(first, ValueError) and str(first) == "batch of 2 failed"
    assert third is first
    assert second == 1


def test_a_caller_cancelled_while_waiting_is_not_run(executor: SerialExecutor) -> None:
    started, release = threading.Event(), threading.Event()
    recorder = Recorder()

    def blocking(requests: list[Request]) -> list[int]:
        started.set()
        release.wait()
        return recorder(requests)

    batcher = RequestBatcher(executor, blocking)

    async def main() -> int:
        first = batcher.submit(Request(0))
        await asyncio.to_thread(started.wait)
        cancelled, kept = batcher.submit(Request(1)), batcher.submit(Request(2))
        cancelled.cancel()
        release.set()
        await first
        return await kept

    assert asyncio.run(main()) == 20
    assert recorder.batches == [[0], [2]]


def test_a_request_after_shutdown_fails_instead_of_hanging() -> None:
    executor = SerialExecutor("test-batcher")
    executor.shutdown()
    batcher = RequestBatcher(executor, Recorder())
    with pytest.raises(RuntimeError, match="shutdown"):
        _run_at_once(batcher, [Request(0), Request(1)])


@pytest.mark.parametrize("limits", [{"max_sequences": 0}, {"max_tokens": -1}])
def test_batch_limits_below_one_are_config_errors(limits: dict[str, int]) -> None:
    with pytest.raises(ConfigError, match=f"{next(iter(limits))} must be >= 1"):
        BatchLimits(**limits)


_requests = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(1, 4), st.integers(1, 12)), min_size=1, max_size=25
).map(lambda specs: [Request(i, key, rows, length) for i, (key, rows, length) in enumerate(specs)])


@given(_requests, st.integers(1, 8), st.integers(1, 60))
def test_split_batches_serves_each_request_once_oldest_first_within_the_limits(
    requests: list[Request], max_sequences: int, max_tokens: int
) -> None:
    batches = split_batches(requests, BatchLimits(max_sequences, max_tokens))
    assert sorted(i for batch in batches for i in batch) == list(range(len(requests)))
    served: set[int] = set()
    for batch in batches:
        assert batch[0] == min(set(range(len(requests))) - served)  # led by the oldest request left
        assert batch == sorted(batch)
        members = [requests[i] for i in batch]
        assert len({r.key for r in members}) == 1
        rows = sum(r.rows for r in members)
        assert len(batch) == 1 or (rows <= max_sequences and rows * max(r.length for r in members) <= max_tokens)
        served.update(batch)
