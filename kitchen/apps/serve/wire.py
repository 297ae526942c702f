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
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import torch
from google.protobuf.message import DecodeError
from tinker import types as sdk
from tinker.proto import tinker_public_pb2 as pb
from tinker.types.topk_logprobs import MASK_LOGPROB

from kitchen.apps.serve.http_basics import WireError
from kitchen.apps.serve.refusals import DMEL_AUDIO, refuse
from train_core.types import (
    AdamParams,
    Datum,
    EncodedTextChunk,
    ForwardBackwardOutput,
    ImageChunk,
    ModelInput,
    ModelInputChunk,
    PromptScores,
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


def _image(data: bytes, image_format: str, expected_tokens: int | None, where: str) -> ImageChunk:
    if image_format not in ("png", "jpeg"):
        raise WireError(f"{where}: image format {image_format!r} is not png or jpeg")
    if expected_tokens is None or expected_tokens < 1:
        raise WireError(
            f"{where}: an image chunk needs expected_tokens (the positions it fills, from the model's renderer)"
        )
    return ImageChunk(data, image_format, expected_tokens)  # type: ignore[arg-type]  # checked above


def _model_input_from_pb(chunks: Sequence[pb.Chunk], where: str) -> ModelInput:
    parsed: list[ModelInputChunk] = []
    for chunk in chunks:
        kind = chunk.WhichOneof("chunk")
        if kind == "image":
            image = chunk.image
            expected = image.expected_tokens if image.HasField("expected_tokens") else None
            parsed.append(_image(image.data, image.format, expected, where))
            continue
        if kind == "dmel":
            raise refuse(DMEL_AUDIO)
        if kind != "encoded_text":
            raise WireError(f"{where}: unknown model input chunk {kind!r}")
        raw = chunk.encoded_text.tokens
        if len(raw) % 4:
            raise WireError(f"{where}: token bytes are not int32 values")
        parsed.append(EncodedTextChunk(tuple(int(t) for t in np.frombuffer(raw, dtype=np.int32))))
    return ModelInput(tuple(parsed))


def _span_total(spans: Sequence[pb.ProvenanceSpan]) -> int:
    total = 0
    for span in spans:
        arm = span.WhichOneof("span")
        total += getattr(span, arm).length if arm is not None else 0
    return total


def _check_provenance(message: pb.Datum, datum: Datum, where: str) -> None:
    """Provenance spans (`Datum.with_provenance`) must tile what they annotate. They tie tokens to
    sampled sequences for stable_reinforce's stability data, which is not served, so once checked
    they change nothing here."""
    if message.model_input_spans and _span_total(message.model_input_spans) != datum.model_input.length:
        raise WireError(f"{where}: model_input_spans do not tile the {datum.model_input.length} input tokens")
    targets = datum.loss_fn_inputs.get("target_tokens")
    rows = targets.shape[0] if targets is not None and len(targets.shape) == 1 else None
    if message.loss_fn_input_spans and rows is not None and _span_total(message.loss_fn_input_spans) != rows:
        raise WireError(f"{where}: loss_fn_input_spans do not tile the {rows} target tokens")


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
        parsed = Datum(
            _model_input_from_pb(datum.model_input, where),
            {name: _tensor_from_pb(t, f"{where}.{name}") for name, t in datum.loss_fn_inputs.items()},
        )
        _check_provenance(datum, parsed, where)
        data.append(parsed)
    if not msg.model_id:
        raise WireError("forward_backward: model_id is missing")
    return LossRequest(msg.model_id, int(msg.seq_id), msg.loss_fn, config, bool(msg.forward_only), data)


def encode_loss_output(output: ForwardBackwardOutput) -> bytes:
    """A `ForwardBackwardOutput` protobuf: the datums' outputs in ArrayRecords, one per run of
    consecutive datums whose fields have the same trailing shape (one record unless some datums
    have [T] outputs and others [T, K])."""
    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    for key, value in output.metrics.items():
        msg.metrics[key] = float(value)
    outputs = output.loss_fn_outputs
    if not outputs:
        msg.loss_fn_outputs.add(type_tag="ArrayRecord", num_datums=0)
    start = 0
    while start < len(outputs):
        shape = _trailing(outputs[start])
        end = start + 1
        while end < len(outputs) and _trailing(outputs[end]) == shape:
            end += 1
        _add_record(msg, outputs[start:end])
        start = end
    return msg.SerializeToString()


def _trailing(row: Mapping[str, TensorData]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple((name, tuple(t.shape[1:])) for name, t in sorted(row.items()))


def _add_record(msg: pb.ForwardBackwardOutput, outputs: Sequence[Mapping[str, TensorData]]) -> None:
    record = msg.loss_fn_outputs.add(type_tag="ArrayRecord", num_datums=len(outputs))
    for name in outputs[0]:
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


def _topk_pb(rows: Sequence[Sequence[tuple[int, float]]], k: int) -> pb.TopkLogprobs:
    """[n, k] token ids and logprobs; empty cells (a row with nothing to report, or shorter than
    k) hold the SDK's sentinel (token 0, logprob MASK_LOGPROB), which it reads as "nothing"."""
    ids = np.zeros((len(rows), k), dtype=np.int32)
    values = np.full((len(rows), k), MASK_LOGPROB, dtype=np.float32)
    for i, row in enumerate(rows):
        for j, (token, logprob) in enumerate(row[:k]):
            ids[i, j], values[i, j] = token, logprob
    return pb.TopkLogprobs(token_ids=ids.tobytes(), logprobs=values.tobytes(), k=k, length=len(rows))


def _dense_pb(values: np.ndarray) -> pb.Tensor:
    dtype = pb.DTYPE_INT64 if values.dtype.kind in "iu" else pb.DTYPE_FLOAT32
    array = values.astype(np.int64 if dtype == pb.DTYPE_INT64 else np.float32)
    return pb.Tensor(dtype=dtype, shape=list(array.shape), dense=array.tobytes())


@dataclass(frozen=True)
class PromptReport:
    """What a sample request asked about its prompt, as scored: logprobs (None: not asked), and the
    `PromptScores` of top-k / targets / alternatives with the widths asked (0: not asked)."""

    logprobs: Sequence[float | None] | None = None
    scores: PromptScores | None = None
    topk: int = 0
    target_width: int = 0
    alt_k: int = 0


def encode_sample_response(result: SampleResult | None, prompt: PromptReport, topk_sampled: int = 0) -> bytes:
    """A `SampleResponse` protobuf; prompt logprobs go as float32 with NaN where there is none,
    target logprobs likewise ([len - 1, K]), top-k lists as [n, k] grids."""
    msg = pb.SampleResponse()
    for sequence in result.sequences if result is not None else ():
        seq = msg.sequences.add(
            stop_reason=_STOP_REASONS[sequence.stop_reason],
            tokens=np.asarray(sequence.tokens, dtype=np.int32).tobytes(),
        )
        if sequence.maybe_logprobs is not None:
            seq.logprobs = np.asarray(sequence.maybe_logprobs, dtype=np.float32).tobytes()
        if topk_sampled > 0 and sequence.maybe_topk is not None:
            seq.topk_sampled_logprobs.CopyFrom(_topk_pb(sequence.maybe_topk, topk_sampled))
    if prompt.logprobs is not None:
        values = [np.nan if lp is None else lp for lp in prompt.logprobs]
        msg.prompt_logprobs = np.asarray(values, dtype=np.float32).tobytes()
    scores = prompt.scores
    if scores is not None and scores.topk is not None and prompt.topk > 0:
        # row 0 (the first prompt token) has no context: an empty row, as its logprob is None
        msg.topk_prompt_logprobs.CopyFrom(_topk_pb([[], *scores.topk], prompt.topk))
    if scores is not None and scores.targets is not None:
        grid = np.array(
            [[np.nan if v is None else v for v in row] for row in scores.targets], dtype=np.float32
        ).reshape(len(scores.targets), prompt.target_width)
        msg.target_prompt_logprobs.CopyFrom(_dense_pb(grid))
    if scores is not None and scores.alt_tokens is not None and scores.alt_logprobs is not None:
        shape = (len(scores.alt_tokens), prompt.alt_k)
        msg.prompt_alt_tokens.CopyFrom(
            pb.PromptAltTokens(
                tokens=_dense_pb(np.array(scores.alt_tokens, dtype=np.int64).reshape(shape)),
                logprobs=_dense_pb(np.array(scores.alt_logprobs, dtype=np.float32).reshape(shape)),
            )
        )
    return msg.SerializeToString()


def _asset(location: str, where: str) -> bytes:
    """The bytes of an image asset on this machine (a path or a file:// URL): kitchen serve
    fetches nothing from the network."""
    parsed = urlparse(location)
    if parsed.scheme not in ("", "file"):
        raise WireError(
            f"{where}: image asset {location!r}: kitchen serve reads image assets from its own file system "
            "(a path or file:// URL) and fetches nothing over the network; send the bytes as an ImageChunk"
        )
    path = Path(unquote(parsed.path) if parsed.scheme == "file" else location)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise WireError(f"{where}: image asset {location!r}: cannot read it ({exc.strerror})") from None


def model_input_from_sdk(model_input: sdk.ModelInput, where: str) -> ModelInput:
    chunks: list[ModelInputChunk] = []
    for chunk in model_input.chunks:
        if isinstance(chunk, sdk.EncodedTextChunk):
            chunks.append(EncodedTextChunk(tuple(int(t) for t in chunk.tokens)))
        elif isinstance(chunk, sdk.ImageChunk):
            chunks.append(_image(chunk.data, chunk.format, chunk.expected_tokens, where))
        elif isinstance(chunk, sdk.ImageAssetPointerChunk):
            chunks.append(_image(_asset(chunk.location, where), chunk.format, chunk.expected_tokens, where))
        elif isinstance(chunk, sdk.DmelChunk):
            raise refuse(DMEL_AUDIO)
        else:
            raise WireError(f"{where}: unknown model input chunk {type(chunk).__name__}")
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


def sampling_params_from_sdk(params: sdk.SamplingParams, eos: Sequence[int], topk_logprobs: int = 0) -> SamplingParams:
    """Kitchen's sampling params for the SDK's: `stop=None` keeps implicit EOS stopping (the
    served model's end-of-sequence ids, `eos`), `stop=[]` stops at nothing, as the SDK documents."""
    stop = list(eos) if params.stop is None else _stop_from_sdk(params.stop)
    return SamplingParams(
        max_tokens=params.max_tokens,
        seed=params.seed,
        stop=stop or None,
        temperature=float(params.temperature),
        top_k=int(params.top_k),
        top_p=float(params.top_p),
        topk_logprobs=topk_logprobs,
    )


def adam_params_from_sdk(params: object) -> AdamParams:
    if not isinstance(params, sdk.AdamParams):
        kind = getattr(params, "type", type(params).__name__)
        raise WireError(f"optim_step: only AdamW is served (AdamParams), got optimizer params of type {kind!r}")
    return AdamParams.like(params)


def numeric_config(config: Mapping[str, float | str], loss_fn: str) -> dict[str, float] | None:
    """`loss_fn_config` as kitchen's losses take it (numbers only), None when empty."""
    text = [key for key, value in config.items() if isinstance(value, str)]
    if text:
        raise WireError(f"loss_fn {loss_fn!r}: loss_fn_config {text} must be numbers")
    return {key: float(value) for key, value in config.items()} or None
