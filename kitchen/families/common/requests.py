"""Scoring datums with another model (DPO's reference, RL's KL penalty, a distillation teacher):
the request pattern several workflows share."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kitchen.engine.ports import SamplingClient
from train_core.rl.kl_penalty import logprob_input, target_logprobs
from train_core.types import Datum

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
