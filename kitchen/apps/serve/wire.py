"""The Tinker wire format on the server side: request bodies in, response bodies out.

The SDK sends `forward_backward` as a protobuf `ForwardBackwardRequest` and asks for
`ForwardBackwardOutput` and `SampleResponse` results as protobuf; every other body is JSON in the
shape of the SDK's pydantic request types. The message definitions are the SDK's own (the `tinker`
package is the protocol's published schema); what is written here is the mapping between them and
kitchen's `train_core.types`. Anything that does not decode is a `WireError`, which the app answers
with HTTP 400 naming what was wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from google.protobuf.message import DecodeError
from tinker import types as sdk
from tinker.proto import tinker_public_pb2 as pb

from kitchen.apps.serve.http_basics import WireError
from train_core.types import (
    AdamParams,
    Datum,
    EncodedTextChunk,
    ForwardBackwardOutput,
    ModelInput,
    SampleResult,
    SamplingParams,
    StopCondition,
    TensorData,
)

_PB_DTYPES: dict[int, tuple[np.dtype, str]] = {
    pb.DTYPE_FLOAT32: (np.dtype(np.float32), "float32"),
    pb.DTYPE_INT64: (np.dtype(np.int64), "int64"),
    pb.DTYPE_INT32: (np.dtype(np.int32), "int64"),
}
_TO_PB_DTYPE = {"float32": pb.DTYPE_FLOAT32, "int64": pb.DTYPE_INT64}
_STOP_REASONS = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}


@dataclass(frozen=True)
class LossRequest:
    """A decoded `/forward_backward` body (`forward_only` for `forward`)."""

    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float | str]
    forward_only: bool
    data: list[Datum]


def _tensor_from_pb(msg: pb.Tensor, where: str) -> TensorData:
    if msg.dtype not in _PB_DTYPES:
        raise WireError(f"{where}: unsupported tensor dtype {msg.dtype}")
    np_dtype, dtype = _PB_DTYPES[msg.dtype]
    shape = [int(n) for n in msg.shape]
    if msg.HasField("sparse_csr"):
        values = np.frombuffer(msg.sparse_csr.values, dtype=np_dtype)
        crow = np.frombuffer(msg.sparse_csr.crow_indices, dtype=np.int64)
        col = np.frombuffer(msg.sparse_csr.col_indices, dtype=np.int64)
        if len(shape) != 2 or len(crow) != shape[0] + 1 or len(col) != len(values):
            raise WireError(f"{where}: malformed sparse tensor")
        dense = np.zeros(shape, dtype=np_dtype)
        rows = np.repeat(np.arange(shape[0]), np.diff(crow))
        try:
            dense[rows, col] = values
        except IndexError as exc:
            raise WireError(f"{where}: sparse index out of range") from exc
        values = dense
    else:
        if len(msg.dense) % np_dtype.itemsize:
            raise WireError(f"{where}: {len(msg.dense)} bytes is not a whole number of {dtype} values")
        values = np.frombuffer(msg.dense, dtype=np_dtype)
    shape = shape or [values.size]
    if int(np.prod(shape)) != values.size:
        raise WireError(f"{where}: shape {shape} does not hold {values.size} values")
    target = np.float32 if dtype == "float32" else np.int64
    return TensorData(torch.from_numpy(values.astype(target).reshape(shape)), dtype, shape)  # type: ignore[arg-type]


def _model_input_from_pb(chunks: Sequence[pb.Chunk], where: str) -> ModelInput:
    parsed = []
    for chunk in chunks:
        if chunk.WhichOneof("chunk") != "encoded_text":
            raise WireError(f"{where}: only token chunks are served, got a {chunk.WhichOneof('chunk')} chunk")
        raw = chunk.encoded_text.tokens
        if len(raw) % 4:
            raise WireError(f"{where}: token bytes are not int32 values")
        parsed.append(EncodedTextChunk(tuple(int(t) for t in np.frombuffer(raw, dtype=np.int32))))
    return ModelInput(tuple(parsed))


def decode_loss_request(body: bytes) -> LossRequest:
    """A protobuf `ForwardBackwardRequest` as kitchen types."""
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except DecodeError as exc:
        raise WireError(f"forward_backward: the body is not a ForwardBackwardRequest protobuf ({exc})") from None
    config: dict[str, float | str] = {key: float(value) for key, value in msg.loss_fn_config.items()}
    for key, value in msg.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
    data = []
    for index, datum in enumerate(msg.data):
        where = f"forward_backward data[{index}]"
        data.append(
            Datum(
                _model_input_from_pb(datum.model_input, where),
                {name: _tensor_from_pb(t, f"{where}.{name}") for name, t in datum.loss_fn_inputs.items()},
            )
        )
    if not msg.model_id:
        raise WireError("forward_backward: model_id is missing")
    return LossRequest(msg.model_id, int(msg.seq_id), msg.loss_fn, config, bool(msg.forward_only), data)


def encode_loss_output(output: ForwardBackwardOutput) -> bytes:
    """A `ForwardBackwardOutput` protobuf: one ArrayRecord holding every datum's outputs."""
    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    for key, value in output.metrics.items():
        msg.metrics[key] = float(value)
    outputs = output.loss_fn_outputs
    record = msg.loss_fn_outputs.add(type_tag="ArrayRecord", num_datums=len(outputs))
    for name in outputs[0] if outputs else ():
        tensors = [row[name] for row in outputs]
        dtype = tensors[0].dtype
        np_dtype = np.float32 if dtype == "float32" else np.int64
        arrays = [t.to_torch().numpy().astype(np_dtype, copy=False).reshape(-1) for t in tensors]
        sizes = np.array([0, *(a.nbytes for a in arrays)], dtype=np.int64)
        field = record.fields[name]
        field.dtype = _TO_PB_DTYPE[dtype]
        field.data = b"".join(a.tobytes() for a in arrays)
        field.offsets = np.cumsum(sizes).astype(np.int64).tobytes()
        field.trailing_shape.extend(tensors[0].shape[1:])
    return msg.SerializeToString()


def encode_sample_response(result: SampleResult | None, prompt_logprobs: Sequence[float | None] | None) -> bytes:
    """A `SampleResponse` protobuf; prompt logprobs go as float32 with NaN where there is none."""
    msg = pb.SampleResponse()
    for sequence in result.sequences if result is not None else ():
        seq = msg.sequences.add(
            stop_reason=_STOP_REASONS[sequence.stop_reason],
            tokens=np.asarray(sequence.tokens, dtype=np.int32).tobytes(),
        )
        if sequence.maybe_logprobs is not None:
            seq.logprobs = np.asarray(sequence.maybe_logprobs, dtype=np.float32).tobytes()
    if prompt_logprobs is not None:
        values = [np.nan if lp is None else lp for lp in prompt_logprobs]
        msg.prompt_logprobs = np.asarray(values, dtype=np.float32).tobytes()
    return msg.SerializeToString()


def model_input_from_sdk(model_input: sdk.ModelInput, where: str) -> ModelInput:
    chunks = []
    for chunk in model_input.chunks:
        if not isinstance(chunk, sdk.EncodedTextChunk):
            raise WireError(f"{where}: only token chunks are served, got {type(chunk).__name__}")
        chunks.append(EncodedTextChunk(tuple(int(t) for t in chunk.tokens)))
    return ModelInput(tuple(chunks))


def _stop_from_sdk(stop: str | Sequence[str] | Sequence[int] | None) -> StopCondition | None:
    if stop is None:
        return None
    if isinstance(stop, str):
        return [stop]
    items: list[str | int] = list(stop)
    strings = [item for item in items if isinstance(item, str)]
    if len(strings) == len(items):
        return strings
    ids = [item for item in items if isinstance(item, int)]
    if len(ids) == len(items):
        return ids
    raise WireError("sampling_params.stop mixes strings and token ids")


def sampling_params_from_sdk(params: sdk.SamplingParams) -> SamplingParams:
    return SamplingParams(
        max_tokens=params.max_tokens,
        seed=params.seed,
        stop=_stop_from_sdk(params.stop),
        temperature=float(params.temperature),
        top_k=int(params.top_k),
        top_p=float(params.top_p),
    )


def adam_params_from_sdk(params: object) -> AdamParams:
    if not isinstance(params, sdk.AdamParams):
        raise WireError(f"optim_step: only AdamW is served, got optimizer params of type {type(params).__name__}")
    return AdamParams.like(params)


def numeric_config(config: Mapping[str, float | str], loss_fn: str) -> dict[str, float] | None:
    """`loss_fn_config` as kitchen's losses take it (numbers only), None when empty."""
    text = [key for key, value in config.items() if isinstance(value, str)]
    if text:
        raise WireError(f"loss_fn {loss_fn!r}: loss_fn_config {text} must be numbers")
    return {key: float(value) for key, value in config.items()} or None
