"""The real tiny tokenizer and role_colon renderer, for env tests."""

from __future__ import annotations

from adapters.common.tokenizer import load_tokenizer
from train_core.renderers.base import Renderer
from train_core.renderers.registry import get_renderer


def renderer(name: str = "role_colon") -> Renderer:
    return get_renderer(name, load_tokenizer("tiny"))


def reply_tokens(r: Renderer, text: str) -> list[int]:
    """What a well-behaved policy samples for `text`: the body and the stop sequence."""
    stop = r.get_stop_sequences()
    suffix = stop[0] if stop and isinstance(stop[0], str) else ""
    tokens = r.tokenizer.encode(f" {text}{suffix}" if suffix else text, add_special_tokens=False)
    if stop and isinstance(stop[0], int):
        tokens.append(int(stop[0]))
    return tokens
