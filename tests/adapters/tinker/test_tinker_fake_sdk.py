"""The fake SDK rejects what the real SDK or service would, so adapter tests on it mean something."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tinker
from tinker import types

from tests.adapters.tinker.fake_checks import FakeSdkUsageError
from tests.adapters.tinker.fake_sdk import FakeServiceClient, FakeTrainingClient

BASE = "Qwen/Qwen3-8B"
Call = Callable[[Any], Any]
"""A request on a training client (typed loosely: the point is to send what the SDK would refuse)."""


def tensor(values: list[Any], dtype: Any = "float32") -> types.TensorData:
    return types.TensorData(data=values, dtype=dtype, shape=[len(values)])


def ce_datum(inputs: list[int], **overrides: Any) -> types.Datum:
    n = len(inputs)
    loss_inputs = {"target_tokens": tensor(list(range(1, n + 1)), "int64"), "weights": tensor([1.0] * n)}
    return types.Datum(model_input=types.ModelInput.from_ints(inputs), loss_fn_inputs=loss_inputs | overrides)


def training_client(service: FakeServiceClient) -> FakeTrainingClient:
    return service.create_lora_training_client(BASE, rank=4).result()


@pytest.fixture(scope="module")
def service() -> FakeServiceClient:
    return FakeServiceClient()


NUMPY_TOKENS: Any = [np.int64(1)]
ADAPTER_BUGS: list[tuple[Call, str]] = [
    (lambda tc: tc.forward_backward([ce_datum([1, 2, 3])], "cross-entropy"), "not one of the SDK"),
    (lambda tc: tc.forward_backward([ce_datum([1, 2, 3])], "stable_reinforce"), "does not implement"),
    (lambda tc: tc.forward([ce_datum([1, 2, 3])], "ppo", {"clip_low_threshold": "0.8"}), "must be numbers"),
    (lambda tc: tc.forward_backward((ce_datum([1, 2]),), "cross_entropy"), "must be a list"),
    (
        lambda tc: tc.forward_backward(
            # model_construct skips pydantic's coercion, as a careless adapter might
            [types.Datum(types.ModelInput(chunks=[types.EncodedTextChunk.model_construct(tokens=NUMPY_TOKENS)]))],
            "cross_entropy",
        ),
        "plain ints",
    ),
    (lambda tc: tc.optim_step({"learning_rate": 1e-4}), "AdamParams"),
    (lambda tc: tc.save_state("a/b"), "bad checkpoint name"),
]


@pytest.mark.parametrize(("bad_call", "message"), ADAPTER_BUGS)
def test_adapter_bugs_fail_at_submission(service: FakeServiceClient, bad_call: Call, message: str) -> None:
    with pytest.raises(FakeSdkUsageError, match=message):
        bad_call(training_client(service))


SERVICE_REJECTIONS: list[tuple[Call, str]] = [
    (
        lambda tc: tc.forward_backward([ce_datum([1, 2, 3], target_tokens=tensor([1, 2], "int64"))], "cross_entropy"),
        "does not match the 3 input",
    ),
    (
        lambda tc: tc.forward_backward([ce_datum([1, 2, 3], mask=tensor([1.0] * 3))], "cross_entropy"),
        "takes loss_fn_inputs",
    ),
    (
        lambda tc: tc.forward_backward([ce_datum([1, 2, 3], weights=tensor([1, 1, 1], "int64"))], "cross_entropy"),
        "weights must be float32",
    ),
    (
        lambda tc: tc.forward_backward([ce_datum([1, 2, 3], weights=tensor([1.0] * 2))], "cross_entropy"),
        "weights shape",
    ),
    (lambda tc: tc.forward_backward([ce_datum([1, 2, 10**6])], "cross_entropy"), "outside the vocabulary"),
    (lambda tc: tc.forward([ce_datum([1, 2, 3])], "ppo", {"epsilon": 0.2}), "does not accept"),
]


@pytest.mark.parametrize(("bad_call", "message"), SERVICE_REJECTIONS)
def test_bad_request_content_is_a_400_from_the_service(
    service: FakeServiceClient, bad_call: Call, message: str
) -> None:
    future = bad_call(training_client(service))
    with pytest.raises(tinker.BadRequestError, match=message):
        future.result()


def test_empty_data_is_rejected_like_the_sdk(service: FakeServiceClient) -> None:
    with pytest.raises(ValueError, match="No data provided"):
        training_client(service).forward([], "cross_entropy")


def test_bad_sampling_requests_are_rejected(service: FakeServiceClient) -> None:
    sampler = service.create_sampling_client(base_model=BASE).result()
    params = types.SamplingParams(max_tokens=4)
    with pytest.raises(tinker.BadRequestError, match="prompt is empty"):
        sampler.sample(types.ModelInput.empty(), 1, params).result()
    with pytest.raises(tinker.BadRequestError, match="outside the vocabulary"):
        sampler.compute_logprobs(types.ModelInput.from_ints([1, 10**6])).result()
    with pytest.raises(FakeSdkUsageError, match="num_samples"):
        sampler.sample(types.ModelInput.from_ints([1]), 0, params)
    not_params: Any = {"max_tokens": 4}
    with pytest.raises(FakeSdkUsageError, match="SamplingParams"):
        sampler.sample(types.ModelInput.from_ints([1]), 1, not_params)


def test_unknown_paths_and_duplicate_names_are_service_errors(service: FakeServiceClient) -> None:
    async def main() -> None:
        with pytest.raises(tinker.NotFoundError):
            await service.create_sampling_client(model_path="tinker://nope/sampler_weights/x")
        tc = training_client(service)
        path = (await tc.save_state("dup")).path
        with pytest.raises(tinker.NotFoundError):  # a state path is not a sampler path
            await service.create_sampling_client(model_path=path)
        with pytest.raises(tinker.ConflictError):
            await tc.save_state("dup")

    asyncio.run(main())


def test_responses_are_real_sdk_types(service: FakeServiceClient) -> None:
    tc = training_client(service)
    out = tc.forward_backward([ce_datum([1, 2, 3])], "cross_entropy").result()
    assert isinstance(out, types.ForwardBackwardOutput)
    assert isinstance(out.loss_fn_outputs[0]["logprobs"], types.TensorData)
    assert out.loss_fn_outputs[0]["logprobs"].shape == [3]
    sample = (
        tc.save_weights_and_get_sampling_client()
        .result()
        .sample(types.ModelInput.from_ints([1, 2]), 2, types.SamplingParams(max_tokens=3, seed=0))
    )
    assert isinstance(sample, tinker.APIFuture)
    response = sample.result()
    assert isinstance(response, types.SampleResponse)
    assert all(isinstance(seq, types.SampledSequence) and seq.logprobs is not None for seq in response.sequences)
