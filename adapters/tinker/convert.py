"""Conversions between kitchen's `train_core.types` and the tinker SDK's `tinker.types`.

Requests go to the SDK (`*_to_sdk`); responses come back (`*_from_sdk`). Request types also
convert back, so that a round trip is the identity (property-tested). Float tensors cross the
wire as float32, so a kitchen float that is not float32-representable comes back rounded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
from tinker import types as sdk

from kitchen.engine.errors import KitchenError
from train_core.types import (
    AdamParams,
    Datum,
    EncodedTextChunk,
    ForwardBackwardOutput,
    ImageChunk,
    ModelInput,
    ModelInputChunk,
    OptimStepOutput,
    PromptScores,
    SampleResult,
    SamplingParams,
    StopCondition,
    TensorData,
    TokensWithLogprobs,
)

_NUMPY_DTYPES = {"int64": np.int64, "float32": np.float32}


def chunk_to_sdk(chunk: ModelInputChunk) -> sdk.EncodedTextChunk | sdk.ImageChunk:
    """A token run, or an image with its encoded bytes and the positions it fills (the service
    checks that count against its own image processor's)."""
    if isinstance(chunk, ImageChunk):
        return sdk.ImageChunk(data=chunk.data, format=chunk.format, expected_tokens=chunk.expected_tokens)
    return sdk.EncodedTextChunk(tokens=list(chunk.tokens))


def model_input_to_sdk(model_input: ModelInput) -> sdk.ModelInput:
    return sdk.ModelInput(chunks=[chunk_to_sdk(chunk) for chunk in model_input.chunks])


def model_input_from_sdk(model_input: sdk.ModelInput) -> ModelInput:
    chunks: list[ModelInputChunk] = []
    for chunk in model_input.chunks:
        if isinstance(chunk, sdk.EncodedTextChunk):
            chunks.append(EncodedTextChunk(tuple(int(token) for token in chunk.tokens)))
        elif isinstance(chunk, sdk.ImageChunk) and chunk.expected_tokens is not None:
            chunks.append(ImageChunk(chunk.data, chunk.format, chunk.expected_tokens))
        else:
            raise KitchenError(
                f"kitchen handles token chunks and image chunks with expected_tokens, but the model input holds "
                f"{chunk!r:.80}"
            )
    return ModelInput(tuple(chunks))


def tensor_to_sdk(tensor: TensorData) -> sdk.TensorData:
    values = tensor.to_torch().numpy().astype(_NUMPY_DTYPES[tensor.dtype], copy=False).reshape(tensor.shape)
    return sdk.TensorData(data=values, dtype=tensor.dtype, shape=list(tensor.shape))


def tensor_from_sdk(tensor: sdk.TensorData) -> TensorData:
    """Dense kitchen tensor from an SDK one (sparse CSR tensors are densified with zeros)."""
    values = np.array(tensor.to_numpy(), dtype=_NUMPY_DTYPES[tensor.dtype])  # a copy kitchen owns
    return TensorData(torch.from_numpy(values), tensor.dtype, tuple(int(n) for n in values.shape))


def datum_to_sdk(datum: Datum) -> sdk.Datum:
    return sdk.Datum(
        model_input=model_input_to_sdk(datum.model_input),
        loss_fn_inputs={key: tensor_to_sdk(value) for key, value in datum.loss_fn_inputs.items()},
    )


def datum_from_sdk(datum: sdk.Datum) -> Datum:
    return Datum(
        model_input=model_input_from_sdk(datum.model_input),
        loss_fn_inputs={key: tensor_from_sdk(value) for key, value in datum.loss_fn_inputs.items()},
    )


def adam_params_to_sdk(params: AdamParams) -> sdk.AdamParams:
    return sdk.AdamParams(**dataclasses.asdict(params))


def sampling_params_to_sdk(params: SamplingParams) -> sdk.SamplingParams:
    return sdk.SamplingParams(
        max_tokens=params.max_tokens,
        seed=params.seed,
        stop=params.stop,
        temperature=params.temperature,
        top_k=params.top_k,
        top_p=params.top_p,
    )


def _stop_from_sdk(stop: str | Sequence[str] | Sequence[int] | None) -> StopCondition | None:
    if stop is None:
        return None
    if isinstance(stop, str):
        return [stop]
    if all(isinstance(item, str) for item in stop):
        return [str(item) for item in stop]
    return [int(item) for item in stop]


def sampling_params_from_sdk(params: sdk.SamplingParams) -> SamplingParams:
    return SamplingParams(
        max_tokens=params.max_tokens,
        seed=params.seed,
        stop=_stop_from_sdk(params.stop),
        temperature=float(params.temperature),
        top_k=params.top_k,
        top_p=float(params.top_p),
    )


def tokens_with_logprobs_from_sdk(sequence: sdk.SampledSequence) -> TokensWithLogprobs:
    logprobs = sequence.logprobs
    topk = sequence.topk_logprobs
    return TokensWithLogprobs(
        tokens=[int(token) for token in sequence.tokens],
        maybe_logprobs=None if logprobs is None else [float(lp) for lp in logprobs],
        stop_reason=sequence.stop_reason,
        maybe_topk=None if topk is None else [[(int(t), float(lp)) for t, lp in row or []] for row in topk],
    )


def sample_result_from_sdk(response: sdk.SampleResponse) -> SampleResult:
    return SampleResult([tokens_with_logprobs_from_sdk(sequence) for sequence in response.sequences])


def prompt_logprobs_from_sdk(logprobs: Sequence[float | None]) -> list[float | None]:
    """The SDK's prompt logprobs as plain floats; None where it computed none (the first token)."""
    return [None if lp is None else float(lp) for lp in logprobs]


def prompt_scores_from_sdk(response: sdk.SampleResponse) -> PromptScores:
    """A sample response's prompt logprobs and top-k prompt logprobs as `PromptScores` (whose rows
    start at the prompt's second token; the SDK's first row, for the first token, is empty)."""
    rows = response.topk_prompt_logprobs or []
    return PromptScores(
        logprobs=prompt_logprobs_from_sdk(response.prompt_logprobs or []),
        topk=[[(int(token), float(lp)) for token, lp in (row or [])] for row in rows[1:]],
    )


def forward_backward_output_from_sdk(output: sdk.ForwardBackwardOutput) -> ForwardBackwardOutput:
    return ForwardBackwardOutput(
        loss_fn_outputs=[
            {key: tensor_from_sdk(value) for key, value in outputs_D.items()} for outputs_D in output.loss_fn_outputs
        ],
        metrics={key: float(value) for key, value in output.metrics.items()},
    )


def optim_step_output_from_sdk(response: sdk.OptimStepResponse) -> OptimStepOutput:
    return OptimStepOutput(metrics={key: float(value) for key, value in (response.metrics or {}).items()})
