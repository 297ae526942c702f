"""The conversation types every renderer consumes and produces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

from train_core.renderers.errors import RendererError


class ToolCall(TypedDict):
    """A function call made by the model; `arguments` is the decoded JSON object."""

    name: str
    arguments: dict[str, Any]
    id: NotRequired[str]


class Message(TypedDict):
    """One chat message. `thinking` is the reasoning a model emitted before `content`;
    `trainable` is read only under `TrainOnWhat.CUSTOMIZED`; `tool_call_id` ties a `tool` message
    to the call it answers; `name` is the tool's name on a `tool` message. For a vision-language
    renderer (`Renderer.takes_images`) `content` may also be a list of parts (`ContentPart`), as
    Hugging Face chat templates take them; every other renderer reads it as a string."""

    role: str
    content: str
    thinking: NotRequired[str]
    tool_calls: NotRequired[list[ToolCall]]
    trainable: NotRequired[bool]
    name: NotRequired[str]
    tool_call_id: NotRequired[str]


def reject_unsupported(
    renderer: str,
    index: int,
    message: Message,
    fields: tuple[str, ...],
    hint: str = "use a renderer of a model family that has a format for it",
) -> None:
    """Fails loudly on a field a format cannot express, rather than silently dropping it."""
    for field in fields:
        if message.get(field):
            role = message["role"]
            raise RendererError(f"{renderer} cannot render {field!r} (message {index}, role {role!r}); {hint}")


def reject_trained_thinking(renderer: str, thinking_renderer: str, index: int, message: Message) -> None:
    """For a thinking-disabled renderer, on the reply being trained, where the model's template
    would write its reasoning (or silently drop it, as Kimi's does): the prompt told the model not
    to reason, so training on reasoning after it (or silently without it) would teach another
    conversation than the one given. Thinking on earlier messages is dropped where the template
    drops it, not rejected."""
    reject_unsupported(
        renderer, index, message, ("thinking",), f"thinking is off: use {thinking_renderer!r} or remove the thinking"
    )


STANDARD_ROLES = frozenset({"system", "user", "assistant", "tool"})
"""The roles every renderer has a format for; a renderer with more (or fewer) sets `roles`."""


class MessageFormatError(RendererError):
    """A conversation record whose messages are not {role, content} objects with string fields and
    a role the renderer supports."""


ContentPart = dict[str, Any]
"""`{"type": "text", "text": str}` or `{"type": "image", "image": PIL image | path | data URL}`."""

IMAGE_PART_TYPES = frozenset({"image", "image_url"})


def content_parts(message: Message) -> list[ContentPart]:
    """The message's content as parts: a string is one text part."""
    content: object = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)  # type: ignore[call-overload]


def has_images(messages: Sequence[Message]) -> bool:
    return any(
        not isinstance(m["content"], str) and any(p.get("type") in IMAGE_PART_TYPES for p in content_parts(m))
        for m in messages
    )


def check_messages(
    value: object, roles: frozenset[str] = STANDARD_ROLES, key: str = "messages", images: bool = False
) -> list[Message]:
    """`value` as a list of messages, each an object whose `role` is one of `roles` and whose
    `content` is a string (never a number or an object silently turned into text); with `images`,
    content may also be a list of text and image parts (for a vision-language renderer)."""
    if not isinstance(value, list):
        raise MessageFormatError(f"{key!r} must be a list of messages, got {type(value).__name__}")
    for index, message in enumerate(value):
        where = f"{key!r}[{index}]"
        if not isinstance(message, dict):
            raise MessageFormatError(
                f"{where} must be an object with 'role' and 'content', got {type(message).__name__}"
            )
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str):
            raise MessageFormatError(f"{where} needs a string 'role', got {type(role).__name__}")
        if role not in roles:
            raise MessageFormatError(f"{where} has unknown role {role!r}; this renderer supports {sorted(roles)}")
        if isinstance(content, list) and images:
            _check_parts(content, where)
            continue
        if isinstance(content, list):
            raise MessageFormatError(f"{where} 'content' is a list of parts: {_parts_problem(content)}")
        if not isinstance(content, str):
            raise MessageFormatError(f"{where} 'content' must be a string, got {type(content).__name__}")
    return value


def _parts_problem(parts: list[object]) -> str:
    """What to do about HF-style content parts (`[{"type": "text", "text": ...}, {"type": "image"}]`)."""
    kinds = {part.get("type") for part in parts if isinstance(part, dict)}
    if kinds & {"image", "image_url", "video"}:
        return (
            "image parts need a vision-language renderer (qwen3_vl, qwen3_vl_instruct) where messages may hold images"
        )
    return "give the text as one string"


def _check_parts(parts: list[object], where: str) -> None:
    for index, part in enumerate(parts):
        at = f"{where} 'content'[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part, dict) or kind not in {"text", *IMAGE_PART_TYPES}:
            raise MessageFormatError(f"{at} must be a {{'type': 'text'}} or {{'type': 'image'}} part, got {part!r:.80}")
        if kind == "text" and not isinstance(part.get("text"), str):
            raise MessageFormatError(f"{at} is a text part without a string 'text'")
        if kind in IMAGE_PART_TYPES and part.get("image", part.get("image_url")) is None:
            raise MessageFormatError(f"{at} is an image part without an 'image'")
