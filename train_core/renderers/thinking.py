"""Think blocks in rendered tokens: a renderer whose format writes reasoning between two special
tokens (`Renderer.think_delimiters`, e.g. `<think>` ... `</think>`) lets a supervised example
leave the reasoning untrained while the answer after it is trained (reasoning distillation with
its thinking masked)."""

from __future__ import annotations

from collections.abc import Sequence

from train_core.renderers.base import Renderer
from train_core.renderers.errors import RendererError
from train_core.renderers.tokenizer import TokenCodec


def think_token_ids(renderer: Renderer) -> tuple[int, int]:
    """The ids of the tokens that open and close a think block in `renderer`'s format; a renderer
    without them is a RendererError naming it."""
    delimiters = renderer.think_delimiters
    if delimiters is None:
        raise RendererError(
            f"renderer {type(renderer).__name__} marks no think block with special tokens, so its thinking "
            "cannot be masked; train it (train_thinking: true) or use a renderer with think blocks (qwen3, ...)"
        )
    codec = TokenCodec(renderer.tokenizer)
    return codec.special_id(delimiters[0]), codec.special_id(delimiters[1])


def mask_think_blocks(tokens: Sequence[int], weights: Sequence[float], open_id: int, close_id: int) -> list[float]:
    """`weights` with every think block set to 0: from its opening token to its closing token, both
    included. A block opened before the first token (a prompt that opens it) counts from the
    start when a closing token comes first."""
    first_close = next((i for i, t in enumerate(tokens) if t == close_id), None)
    first_open = next((i for i, t in enumerate(tokens) if t == open_id), None)
    inside = first_close is not None and (first_open is None or first_close < first_open)
    masked = []
    for token, weight in zip(tokens, weights, strict=True):
        inside = inside or token == open_id
        masked.append(0.0 if inside else float(weight))
        if token == close_id:
            inside = False
    return masked
