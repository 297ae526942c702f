"""Substeps: the batch splits evenly, and chunk k+1 is submitted before chunk k is awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator, Sequence
from typing import Any, TypeVar

from hypothesis import given
from hypothesis import strategies as st

from adapters.noop import NoopBackend
from kitchen.families.common.training import pipelined_steps, train_in_chunks
from train_core.batching import split_evenly
from train_core.supervised import datum_from_tokens_weights
from train_core.types import AdamParams, Datum, ForwardBackwardOutput

T = TypeVar("T")


@given(st.lists(st.integers(), max_size=40), st.integers(1, 12))
def test_split_evenly_keeps_order_and_balances(items: list[int], n: int) -> None:
    chunks = split_evenly(items, n)
    assert [x for chunk in chunks for x in chunk] == items
    assert len(chunks) == min(n, len(items))
    sizes = [len(chunk) for chunk in chunks]
    assert not sizes or (max(sizes) - min(sizes) <= 1 and min(sizes) >= 1)


class _Logged:
    """An awaitable that notes when it is awaited."""

    def __init__(self, inner: Awaitable[T], events: list[str], label: str) -> None:
        self.inner, self.events, self.label = inner, events, label

    def __await__(self) -> Generator[Any, None, Any]:
        self.events.append(f"await {self.label}")
        return self.inner.__await__()


class RecordingClient:
    """A real noop training client whose submissions and awaits are written to `events`."""

    def __init__(self, inner: Any, events: list[str]) -> None:
        self.inner, self.events, self.count = inner, events, 0

    async def forward_backward(self, data: Sequence[Datum], loss_fn: str, config: Any = None) -> _Logged:
        self.events.append(f"submit fb{self.count}")
        return _Logged(await self.inner.forward_backward(data, loss_fn, config), self.events, f"fb{self.count}")

    async def optim_step(self, adam: AdamParams) -> _Logged:
        label = f"optim{self.count}"
        self.count += 1
        self.events.append(f"submit {label}")
        return _Logged(await self.inner.optim_step(adam), self.events, label)


def test_next_chunk_is_submitted_before_the_current_is_awaited() -> None:
    chunks = [[datum_from_tokens_weights([5, 6, 7, 8], [0, 1, 1, 1])] for _ in range(3)]
    events: list[str] = []

    async def run() -> int:
        backend = NoopBackend(seed=0, latency={"forward_backward": 0.01})
        client = RecordingClient(await backend.create_training_client("tiny"), events)
        results = await train_in_chunks(client, chunks, "cross_entropy", None, AdamParams(1e-3))  # type: ignore[arg-type]
        return len(results)

    assert asyncio.run(run()) == 3
    assert events == [
        "submit fb0", "submit optim0",
        "submit fb1", "submit optim1", "await fb0", "await optim0",
        "submit fb2", "submit optim2", "await fb1", "await optim1",
        "await fb2", "await optim2",
    ]  # fmt: skip


def test_forward_backward_outputs_are_handed_over_before_the_last_optimizer_step_is_awaited() -> None:
    """The client's work on a step's losses (the RL metrics) overlaps the backend's last step."""
    chunks = [[datum_from_tokens_weights([5, 6, 7, 8], [0, 1, 1, 1])] for _ in range(2)]
    events: list[str] = []
    handed: list[list[ForwardBackwardOutput]] = []

    def measure(fb_outputs: list[ForwardBackwardOutput]) -> None:
        events.append(f"measure {len(fb_outputs)}")
        handed.append(fb_outputs)

    async def run() -> list[ForwardBackwardOutput]:
        backend = NoopBackend(seed=0, latency={"forward_backward": 0.01})
        client = RecordingClient(await backend.create_training_client("tiny"), events)

        async def forward_backward(chunk: Sequence[Datum]) -> Awaitable[ForwardBackwardOutput]:
            return await client.forward_backward(chunk, "cross_entropy")

        adam = AdamParams(1e-3)
        results = await pipelined_steps(client, chunks, forward_backward, adam, on_forward_backward=measure)  # type: ignore[arg-type]
        return [fb for fb, _ in results]

    outputs = asyncio.run(run())
    assert events[-3:] == ["await fb1", "measure 2", "await optim1"]
    assert handed == [outputs]


def test_no_chunks_means_no_calls() -> None:
    assert asyncio.run(train_in_chunks(None, [], "ppo", None, AdamParams(1e-3))) == []  # type: ignore[arg-type]
