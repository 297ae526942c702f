"""Supervised datum building: shift tokens into (input, target) pairs with per-token weights."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, cast

from train_core.errors import InvalidInputError
from train_core.renderers.messages import Message
from train_core.types import Datum, EncodedTextChunk, ImageChunk, ModelInput, ModelInputChunk, TensorData

if TYPE_CHECKING:
    import torch

Reduction = Literal["none", "mean"]

CHARS_PER_TOKEN_BOUND = 8
"""Text is cut to `CHARS_PER_TOKEN_BOUND * max_length` characters before tokenization (no
tokenizer makes tokens longer than that on ordinary text), so one huge record costs memory in
proportion to `max_length`, not to its size."""


def char_limit(max_length: int | None) -> int | None:
    """The characters of one text field that can still reach the first `max_length` tokens."""
    return None if max_length is None else CHARS_PER_TOKEN_BOUND * max_length


def cut_messages(messages: Sequence[Message], max_length: int | None) -> list[Message]:
    """Each message's `content` cut to `char_limit(max_length)` characters (other fields, and
    content given as parts, kept: `datum_from_model_input` cuts those at `max_length` tokens)."""
    limit = char_limit(max_length)
    if limit is None:
        return list(messages)
    return [
        message
        if not isinstance(message["content"], str) or len(message["content"]) <= limit
        else cast(Message, {**message, "content": message["content"][:limit]})
        for message in messages
    ]


class SequenceTooShortError(InvalidInputError):
    """A sequence needs at least two tokens to have one (input, target) pair."""


def datum_from_tokens_weights(
    tokens: Sequence[int],
    weights: Sequence[float],
    max_length: int | None = None,
    reduction: Reduction = "none",
) -> Datum:
    """Truncate from the right to `max_length`, then shift: inputs = tokens[:-1],
    targets = tokens[1:], weights = weights[1:]. `reduction="mean"` divides the weights by their
    sum so the summed loss is this example's per-token mean."""
    if len(tokens) != len(weights):
        raise ValueError(f"{len(tokens)} tokens but {len(weights)} weights")
    if max_length is not None:
        tokens, weights = tokens[:max_length], weights[:max_length]
    if len(tokens) < 2:
        raise SequenceTooShortError(f"sequence of {len(tokens)} token(s) is too short to train on")
    target_weights = [float(w) for w in weights[1:]]
    if reduction == "mean":
        total = sum(target_weights)
        if total > 0:
            target_weights = [w / total for w in target_weights]
    elif reduction != "none":
        raise ValueError(f"unknown reduction {reduction!r} (expected 'none' or 'mean')")
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": TensorData.from_list(list(tokens[1:]), "int64"),
            "weights": TensorData.from_list(target_weights, "float32"),
        },
    )


def prompt_completion_tokens(
    prompt_tokens: Sequence[int], completion_tokens: Sequence[int]
) -> tuple[list[int], list[float]]:
    """Concatenate, training only on the completion."""
    tokens = [*prompt_tokens, *completion_tokens]
    weights = [0.0] * len(prompt_tokens) + [1.0] * len(completion_tokens)
    return tokens, weights


def mean_nll(logprobs_D: Sequence[torch.Tensor], weights_D: Sequence[torch.Tensor]) -> float:
    """-sum(logprob * weight) / sum(weight) over a batch; NaN when no token has weight."""
    total_weight = sum(float(w.sum()) for w in weights_D)
    if total_weight == 0:
        return float("nan")
    weighted = sum(float((lp.float() * w.float()).sum()) for lp, w in zip(logprobs_D, weights_D, strict=True))
    return -weighted / total_weight


def scored_bytes(datum: Datum, decode: Callable[[list[int]], str]) -> int:
    """UTF-8 bytes of the text a datum's scored targets (weight > 0) spell: each run of scored
    tokens is decoded whole, so a character split across tokens counts once."""
    targets, weights = datum.loss_fn_inputs["target_tokens"].data, datum.loss_fn_inputs["weights"].data
    total, run = 0, []
    for token, weight in zip([*targets, 0], [*weights, 0.0], strict=True):
        if weight > 0:
            run.append(int(token))
        elif run:
            total += len(decode(run).encode("utf-8"))
            run = []
    return total


def sequence_nll(logprobs_D: Sequence[torch.Tensor], weights_D: Sequence[torch.Tensor]) -> list[float]:
    """Each sequence's weighted NLL summed over its tokens, in nats."""
    return [-float((lp.float() * w.float()).sum()) for lp, w in zip(logprobs_D, weights_D, strict=True)]


def bits_per_byte(nll_D: Sequence[float], bytes_D: Sequence[int]) -> float:
    """Summed NLL (`sequence_nll`) in bits per byte of the text the scored tokens spell
    (`scored_bytes`): unlike per-token NLL it does not depend on the tokenizer, so models with
    different vocabularies compare. NaN when the scored tokens spell no bytes."""
    total_bytes = sum(bytes_D)
    if total_bytes == 0:
        return float("nan")
    return math.fsum(nll_D) / (math.log(2) * total_bytes)


IMAGE_TARGET = 0
"""The target id where the next position holds an image (a placeholder, never trained: weight 0)."""


def datum_from_model_input(
    model_input: ModelInput, weights: Sequence[float], max_length: int | None = None, reduction: Reduction = "none"
) -> Datum:
    """`datum_from_tokens_weights` for a model input that may hold images: the input keeps its
    image chunks, targets at image positions are IMAGE_TARGET with weight 0. Truncation to
    `max_length` drops an image that does not fit whole, with everything after it."""
    if not model_input.images:
        return datum_from_tokens_weights(model_input.to_ints(), weights, max_length, reduction)
    if model_input.length != len(weights):
        raise ValueError(f"{model_input.length} positions but {len(weights)} weights")
    chunks: list[ModelInputChunk] = []
    length = 0
    for chunk in model_input.chunks:
        room = (max_length if max_length is not None else model_input.length) - length
        if chunk.length > room:
            if isinstance(chunk, EncodedTextChunk) and room > 0:
                chunks.append(EncodedTextChunk(chunk.tokens[:room]))
                length += room
            break
        chunks.append(chunk)
        length += chunk.length
    last = chunks[-1] if chunks else None
    if not isinstance(last, EncodedTextChunk):
        raise SequenceTooShortError("the example ends in an image: there is no token after it to train on")
    ids = ModelInput(tuple(chunks)).token_ids(IMAGE_TARGET)
    is_image = _image_positions(chunks)
    kept_weights = [0.0 if is_image[p] else float(weights[p]) for p in range(length)]
    datum = datum_from_tokens_weights(ids, kept_weights, None, reduction)
    shortened = (*chunks[:-1], EncodedTextChunk(last.tokens[:-1])) if last.length > 1 else tuple(chunks[:-1])
    return Datum(ModelInput(tuple(c for c in shortened if c.length)), datum.loss_fn_inputs)


def _image_positions(chunks: Sequence[ModelInputChunk]) -> list[bool]:
    """Whether each position holds an image."""
    return [isinstance(chunk, ImageChunk) for chunk in chunks for _ in range(chunk.length)]
