"""Property tests: kitchen <-> tinker SDK type conversions lose nothing the wire can carry."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tinker import types as sdk

from adapters.tinker.convert import (
    adam_params_to_sdk,
    datum_from_sdk,
    datum_to_sdk,
    forward_backward_output_from_sdk,
    model_input_from_sdk,
    model_input_to_sdk,
    optim_step_output_from_sdk,
    prompt_logprobs_from_sdk,
    sample_result_from_sdk,
    sampling_params_from_sdk,
    sampling_params_to_sdk,
    tensor_from_sdk,
    tensor_to_sdk,
)
from kitchen.engine.errors import KitchenError
from train_core.types import (
    AdamParams,
    Datum,
    EncodedTextChunk,
    ImageChunk,
    ModelInput,
    SamplingParams,
    TensorData,
)

tokens = st.integers(min_value=0, max_value=2**31 - 1)
float32s = st.floats(width=32, allow_nan=False)
finite = st.floats(allow_nan=False, allow_infinity=False)

chunks = st.lists(tokens, max_size=6).map(lambda ids: EncodedTextChunk(tuple(ids))) | st.builds(
    ImageChunk, st.binary(max_size=16), st.sampled_from(["png", "jpeg"]), st.integers(1, 300)
)
model_inputs = st.lists(chunks, max_size=4).map(lambda parts: ModelInput(tuple(parts)))


@st.composite
def tensors(draw: st.DrawFn) -> TensorData:
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=1, max_size=3)))
    size = math.prod(shape)
    if draw(st.booleans()):
        ints = draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=size, max_size=size))
        return TensorData(tuple(ints), "int64", shape)
    floats = draw(st.lists(float32s, min_size=size, max_size=size))
    return TensorData(tuple(floats), "float32", shape)


data = st.builds(Datum, model_inputs, st.dictionaries(st.sampled_from(["target_tokens", "weights", "x"]), tensors()))


@given(model_inputs)
def test_model_input_round_trip_keeps_chunks(model_input: ModelInput) -> None:
    converted = model_input_to_sdk(model_input)
    assert isinstance(converted, sdk.ModelInput)
    assert converted.length == model_input.length
    assert model_input_from_sdk(converted) == model_input
    # what the SDK sends (image bytes as base64 in JSON) reads back as the same input
    wire = sdk.ModelInput.model_validate(converted.model_dump(mode="json"))
    assert model_input_from_sdk(wire) == model_input


@given(tensors())
def test_tensor_round_trip(tensor: TensorData) -> None:
    converted = tensor_to_sdk(tensor)
    assert converted.dtype == tensor.dtype
    assert converted.shape == list(tensor.shape)
    assert tensor_from_sdk(converted) == tensor


@given(tensors())
def test_tensor_to_sdk_matches_kitchen_torch_view(tensor: TensorData) -> None:
    assert torch.equal(tensor_to_sdk(tensor).to_torch(), tensor.to_torch())


@given(st.lists(st.lists(st.integers(-5, 5), min_size=3, max_size=3), min_size=1, max_size=6))
def test_sparse_sdk_tensors_come_back_dense(rows: list[list[int]]) -> None:
    dense = torch.tensor(rows, dtype=torch.int64)
    converted = tensor_from_sdk(sdk.TensorData.from_torch_sparse(dense))
    assert converted.shape == tuple(dense.shape)
    assert torch.equal(converted.to_torch(), dense)


@given(data)
def test_datum_round_trip(datum: Datum) -> None:
    converted = datum_to_sdk(datum)
    assert isinstance(converted, sdk.Datum)
    assert datum_from_sdk(converted) == datum


@given(st.builds(AdamParams, finite, finite, finite, finite, finite, finite))
def test_adam_params_round_trip(params: AdamParams) -> None:
    converted = adam_params_to_sdk(params)
    assert converted.beta2 == params.beta2 and converted.eps == params.eps
    assert AdamParams.like(converted) == params


stops = st.none() | st.lists(st.text(min_size=1, max_size=5), max_size=3) | st.lists(tokens, min_size=1, max_size=3)


@given(
    st.builds(
        SamplingParams,
        max_tokens=st.none() | st.integers(1, 4096),
        seed=st.none() | st.integers(0, 2**32),
        stop=stops,
        temperature=st.floats(0, 2),
        top_k=st.integers(-1, 100),
        top_p=st.floats(0, 1),
    )
)
def test_sampling_params_round_trip(params: SamplingParams) -> None:
    assert sampling_params_from_sdk(sampling_params_to_sdk(params)) == params


def test_sdk_string_stop_becomes_a_list() -> None:
    assert sampling_params_from_sdk(sdk.SamplingParams(stop="\n\nUser:")).stop == ["\n\nUser:"]


sequences = st.builds(
    lambda toks, with_lp, reason, lp_seed: sdk.SampledSequence(
        stop_reason=reason,
        sequence_id="s",
        tokens_np=np.asarray(toks, dtype=np.int32),
        logprobs_np=(np.random.default_rng(lp_seed).uniform(-9, 0, len(toks)).astype(np.float32) if with_lp else None),
    ),
    st.lists(st.integers(0, 2**31 - 1), max_size=8),
    st.booleans(),
    st.sampled_from(["stop", "length"]),
    st.integers(0, 1000),
)


@given(st.lists(sequences, max_size=4))
def test_sample_response_keeps_tokens_logprobs_and_stop_reason(seqs: list[sdk.SampledSequence]) -> None:
    result = sample_result_from_sdk(sdk.SampleResponse(sequences=seqs))
    assert len(result.sequences) == len(seqs)
    for ours, theirs in zip(result.sequences, seqs, strict=True):
        assert ours.tokens == theirs.tokens and all(type(t) is int for t in ours.tokens)
        assert ours.maybe_logprobs == theirs.logprobs
        assert ours.stop_reason == theirs.stop_reason


@given(
    st.lists(st.dictionaries(st.sampled_from(["logprobs", "elementwise_loss"]), tensors()), max_size=4),
    st.dictionaries(st.text(max_size=8), finite),
)
def test_forward_backward_output_keeps_every_tensor_and_metric(
    outputs: list[dict[str, TensorData]], metrics: dict[str, float]
) -> None:
    sdk_outputs = [{key: tensor_to_sdk(value) for key, value in d.items()} for d in outputs]
    converted = forward_backward_output_from_sdk(
        sdk.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=sdk_outputs, metrics=metrics)
    )
    assert converted.loss_fn_outputs == outputs
    assert converted.metrics == metrics


@given(st.none() | st.dictionaries(st.text(max_size=8), finite))
def test_optim_step_output_keeps_metrics(metrics: dict[str, float] | None) -> None:
    assert optim_step_output_from_sdk(sdk.OptimStepResponse(metrics=metrics)).metrics == (metrics or {})


@given(st.lists(st.none() | float32s, max_size=8))
def test_prompt_logprobs_stay_aligned(logprobs: list[float | None]) -> None:
    converted = prompt_logprobs_from_sdk(logprobs)
    assert converted == logprobs
    assert all(lp is None or type(lp) is float for lp in converted)


def test_chunks_kitchen_cannot_hold_are_a_clear_error() -> None:
    unsized = sdk.ImageChunk(data=b"\x89PNG", format="png")
    pointer = sdk.ImageAssetPointerChunk(location="s3://bucket/cat.png", format="png", expected_tokens=4)
    for chunk in (unsized, pointer):
        with pytest.raises(KitchenError, match="token chunks and image chunks with expected_tokens"):
            model_input_from_sdk(sdk.ModelInput(chunks=[chunk]))
