"""Tool-call payloads shared by renderers: arguments travel as JSON text in every format.

Decoding never raises: a model's malformed output is reported as None so the renderer can return
the raw text with ok=False instead of crashing a rollout."""

from __future__ import annotations

import json
import re
from typing import Any

from train_core.renderers.messages import ToolCall


def encode_arguments(arguments: dict[str, Any]) -> str:
    """JSON as Jinja chat templates' `tojson` writes it: `", "` and `": "` separators, non-ASCII
    kept as is."""
    return json.dumps(arguments, ensure_ascii=False)


def decode_arguments(text: str) -> dict[str, Any] | None:
    """The arguments object in `text`, or None when it is not a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def encode_argument_value(value: Any) -> str:
    """One argument in the key/value call formats (Qwen3.5 XML, GLM): a string as is, anything else
    as JSON, as the templates write it."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def decode_argument_value(text: str) -> Any:
    """The inverse where it can be: JSON where the text parses, else the string (a string argument
    that reads as JSON, e.g. "3", comes back typed; those formats cannot tell the two apart)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def encode_named_call(call: ToolCall, arguments_key: str = "arguments") -> str:
    """`{"name": ..., "<arguments_key>": {...}}`: the payload Qwen3 (`arguments`) and Llama 3.1
    (`parameters`) put in a tool call."""
    return f'{{"name": {json.dumps(call["name"], ensure_ascii=False)}, "{arguments_key}": ' + (
        f"{encode_arguments(call['arguments'])}}}"
    )


def decode_named_call(text: str, arguments_key: str = "arguments") -> ToolCall | None:
    """The inverse of `encode_named_call`; None unless `text` is such an object."""
    payload = decode_arguments(text)
    if payload is None or not isinstance(payload.get("name"), str):
        return None
    arguments = payload.get(arguments_key, {})
    if not isinstance(arguments, dict):
        return None
    return ToolCall(name=payload["name"], arguments=arguments)


def match_calls(call_re: re.Pattern[str], text: str) -> list[tuple[str, ...]] | None:
    """The groups of every `call_re` match when `text` holds nothing else but whitespace; None
    when it holds no call or something besides calls (a malformed or cut-off call)."""
    matches = [m.groups() for m in call_re.finditer(text)]
    if not matches or call_re.sub("", text).strip():
        return None
    return matches
