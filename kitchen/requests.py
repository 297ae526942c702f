"""Request patterns over the ports that several workflows share: scoring datums with another
model (DPO's reference, RL's KL penalty, a distillation teacher) and pipelined optimizer steps."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from kitchen.ports import SamplingClient, TrainingClient
from train_core.rl.kl_penalty import logprob_input, target_logprobs
from train_core.types import AdamParams, Datum, ForwardBackwardOutput, OptimStepOutput

if TYPE_CHECKING:
    import torch


async def score_targets(
    client: SamplingClient | Sequence[SamplingClient], data_D: Sequence[Datum]
) -> list[torch.Tensor]:
    """A model's logprob of each datum's target tokens (no gradients), in data order: `client`'s,
    or with one client per datum, each datum's own (e.g. the teacher of its data set).

    All requests are submitted before any is awaited, so backends can serve them concurrently."""
    clients_D = client if isinstance(client, Sequence) else [client] * len(data_D)
    outputs = await asyncio.gather(
        *(c.compute_logprobs(logprob_input(datum)) for c, datum in zip(clients_D, data_D, strict=True))
    )
    return [target_logprobs(prompt_logprobs) for prompt_logprobs in outputs]


_Submitted = tuple[Awaitable[ForwardBackwardOutput], Awaitable[OptimStepOutput]]


async def train_in_chunks(
    client: TrainingClient,
    chunks: Sequence[Sequence[Datum]],
    loss_fn: str,
    loss_fn_config: dict[str, float] | None,
    adam: AdamParams,
    on_result: Callable[[int, tuple[ForwardBackwardOutput, OptimStepOutput]], None] | None = None,
) -> list[tuple[ForwardBackwardOutput, OptimStepOutput]]:
    """One optimizer step per chunk, in order; the results of every chunk (each also given to
    `on_result(index, result)` as it arrives, e.g. for progress).

    Each chunk's forward_backward + optim_step pair is submitted before the previous one's results
    are awaited, so the backend never waits for the client between substeps (requests run in
    submission order)."""

    async def submit(chunk: Sequence[Datum]) -> _Submitted:
        return await client.forward_backward(chunk, loss_fn, loss_fn_config), await client.optim_step(adam)

    if not chunks:
        return []
    submitted = [await submit(chunks[0])]
    results: list[tuple[ForwardBackwardOutput, OptimStepOutput]] = []
    for index in range(len(chunks)):
        if index + 1 < len(chunks):
            submitted.append(await submit(chunks[index + 1]))
        fb, optim = submitted.pop(0)
        results.append((await fb, await optim))
        if on_result is not None:
            on_result(index, results[-1])
    return results
