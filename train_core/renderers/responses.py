"""Helpers for turning sampled tokens back into an assistant message."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from train_core.renderers.messages import Message, ToolCall


def split_at_stop(tokens: Sequence[int], stop_ids: Collection[int]) -> tuple[list[int], bool]:
    """The tokens before the first stop token, and whether one was found."""
    for i, token in enumerate(tokens):
        if token in stop_ids:
            return list(tokens[:i]), True
    return list(tokens), False


def assistant_message(content: str, thinking: str | None = None, tool_calls: Sequence[ToolCall] = ()) -> Message:
    """An assistant message with `thinking` and `tool_calls` present only when non-empty, so a
    parsed message compares equal to the message that was rendered."""
    message = Message(role="assistant", content=content)
    if thinking:
        message["thinking"] = thinking
    if tool_calls:
        message["tool_calls"] = list(tool_calls)
    return message


def unparsed(text: str) -> tuple[Message, bool]:
    """A response that could not be parsed (cut off, or a malformed tool call): the raw text kept
    as content, ok=False."""
    return Message(role="assistant", content=text), False
