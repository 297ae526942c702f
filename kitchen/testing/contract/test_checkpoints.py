"""Contract: saving and loading weights, optimizer state and sampler snapshots on every backend."""

from __future__ import annotations

import asyncio

import pytest

from kitchen.engine.ports import ServiceBackend
from kitchen.testing.contract.data import (
    BASE_MODEL,
    LOGPROB_ATOL,
    encode_texts,
    forward_logprobs,
    max_abs_diff,
    scored_logprobs,
    sft_batch,
    train_step,
)
from train_core.errors import InvalidInputError


def test_state_round_trip_reproduces_logprobs(backend: ServiceBackend) -> None:
    data = sft_batch(backend)

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL, lora_rank=4)
        await train_step(client, data)
        path = await (await client.save_state("after-one-step"))
        expected_D = await forward_logprobs(client, data)
        for with_optimizer in (True, False):
            restored = await backend.create_training_client_from_state(path, with_optimizer=with_optimizer)
            assert max_abs_diff(await forward_logprobs(restored, data), expected_D) <= LOGPROB_ATOL, with_optimizer

    asyncio.run(main())


def test_resumed_optimizer_continues_like_the_original(backend: ServiceBackend) -> None:
    """With its optimizer state restored, a client's next step lands where the original's does."""
    data = sft_batch(backend)

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL)
        await train_step(client, data)
        path = await (await client.save_state("step-1"))
        restored = await backend.create_training_client_from_state(path, with_optimizer=True)
        await train_step(client, data)
        await train_step(restored, data)
        original_D = await forward_logprobs(client, data)
        assert max_abs_diff(await forward_logprobs(restored, data), original_D) <= LOGPROB_ATOL

    asyncio.run(main())


def test_load_state_restores_an_existing_client(backend: ServiceBackend) -> None:
    data = sft_batch(backend)

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL)
        initial_D = await forward_logprobs(client, data)
        path = await (await client.save_state("initial"))
        await train_step(client, data)
        assert max_abs_diff(await forward_logprobs(client, data), initial_D) > 10 * LOGPROB_ATOL
        await (await client.load_state(path))
        assert max_abs_diff(await forward_logprobs(client, data), initial_D) <= LOGPROB_ATOL

    asyncio.run(main())


def test_sampling_client_snapshot_is_frozen_against_later_steps(backend: ServiceBackend) -> None:
    data, tokens_D = sft_batch(backend), encode_texts(backend)

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL)
        snapshot = await client.save_weights_and_get_sampling_client()
        before_D = await scored_logprobs(snapshot, tokens_D)
        await train_step(client, data)
        assert max_abs_diff(await scored_logprobs(snapshot, tokens_D), before_D) <= LOGPROB_ATOL
        fresh = await client.save_weights_and_get_sampling_client()
        assert max_abs_diff(await scored_logprobs(fresh, tokens_D), before_D) > 10 * LOGPROB_ATOL

    asyncio.run(main())


def test_saved_sampler_weights_load_into_an_agreeing_sampling_client(backend: ServiceBackend) -> None:
    data, tokens_D = sft_batch(backend), encode_texts(backend)

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL, lora_rank=4)
        await train_step(client, data)
        path = await (await client.save_weights_for_sampler("sampler-1"))
        expected_D = await forward_logprobs(client, data)
        await train_step(client, data)  # the saved weights must not follow the client
        sampler = await backend.create_sampling_client(model_path=path)
        assert max_abs_diff(await scored_logprobs(sampler, tokens_D), expected_D) <= LOGPROB_ATOL

    asyncio.run(main())


def test_loading_a_missing_state_raises(backend: ServiceBackend) -> None:
    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL)
        path = await (await client.save_state("exists"))
        missing = path.replace("exists", "does-not-exist")
        with pytest.raises(InvalidInputError):
            await backend.create_training_client_from_state(missing)

    asyncio.run(main())
