"""The group policy turns concurrent requests for one prompt into one sample call, with seeds
that depend only on where the sample is drawn."""

from __future__ import annotations

import asyncio

import pytest

from adapters.noop import NoopBackend
from kitchen.engine.errors import DataError
from train_core.rl.rollouts import shared_sampling_policy
from train_core.types import ModelInput, SamplingParams, TokensWithLogprobs

PARAMS = SamplingParams(max_tokens=5, temperature=1.0)
PROMPT_A = ModelInput.from_ints([11, 12, 13])
PROMPT_B = ModelInput.from_ints([11, 12, 14])


async def draw(prompts: list[ModelInput], seed_key: tuple[object, ...]) -> tuple[list[TokensWithLogprobs], NoopBackend]:
    backend = NoopBackend(seed=0)
    training = await backend.create_training_client("tiny")
    sampler = await training.save_weights_and_get_sampling_client()
    policy = shared_sampling_policy(sampler, PARAMS, seed_key)
    results = await asyncio.gather(*(policy(prompt, [9]) for prompt in prompts))
    return list(results), backend


def sample_calls(backend: NoopBackend) -> list[int]:
    return [call.summary["num_samples"] for call in backend.calls if call.method == "sample"]


def test_same_prompt_requests_share_one_call_and_get_distinct_samples() -> None:
    results, backend = asyncio.run(draw([PROMPT_A] * 6, ("k",)))
    assert sample_calls(backend) == [6]
    assert len({tuple(r.tokens) for r in results}) > 1


def test_different_prompts_get_their_own_calls() -> None:
    _, backend = asyncio.run(draw([PROMPT_A, PROMPT_B, PROMPT_A, PROMPT_B, PROMPT_B], ("k",)))
    assert sorted(sample_calls(backend)) == [2, 3]


def test_samples_depend_only_on_the_seed_key() -> None:
    first, _ = asyncio.run(draw([PROMPT_A] * 4, ("train", 0, 3, 1)))
    again, _ = asyncio.run(draw([PROMPT_A] * 4, ("train", 0, 3, 1)))
    other, _ = asyncio.run(draw([PROMPT_A] * 4, ("train", 0, 3, 2)))
    assert [r.tokens for r in first] == [r.tokens for r in again]
    assert [r.tokens for r in first] != [r.tokens for r in other]


def test_a_failed_call_fails_every_request_that_shared_it() -> None:
    async def run() -> list[object]:
        backend = NoopBackend(seed=0)
        sampler = await (await backend.create_training_client("tiny")).save_weights_and_get_sampling_client()
        policy = shared_sampling_policy(sampler, PARAMS, ("k",))
        return await asyncio.gather(*(policy(ModelInput.empty(), [9]) for _ in range(3)), return_exceptions=True)

    outcomes = asyncio.run(run())
    assert len(outcomes) == 3 and all(isinstance(o, DataError) for o in outcomes)


def test_later_requests_for_a_prompt_start_a_new_call_with_a_new_seed() -> None:
    async def run() -> tuple[TokensWithLogprobs, TokensWithLogprobs, list[int]]:
        backend = NoopBackend(seed=0)
        sampler = await (await backend.create_training_client("tiny")).save_weights_and_get_sampling_client()
        policy = shared_sampling_policy(sampler, PARAMS, ("k",))
        first = await policy(PROMPT_A, [9])
        second = await policy(PROMPT_A, [9])
        return first, second, sample_calls(backend)

    first, second, calls = asyncio.run(run())
    assert calls == [1, 1]
    assert first.tokens != second.tokens


@pytest.mark.parametrize("count", [1, 3])
def test_every_request_gets_logprobs(count: int) -> None:
    results, _ = asyncio.run(draw([PROMPT_A] * count, ("k",)))
    assert all(len(r.logprobs) == len(r.tokens) > 0 for r in results)
