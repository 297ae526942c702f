"""Declaring tools to a model: the OpenAI-style tool spec, and the system-prompt texts with which
a model family's chat template lists the tools it may call.

A renderer that has a native tool format sets `declares_tools` and implements `declare_tools`,
which returns the conversation with the tools declared where its template declares them (for the
Qwen families: a system message, before or after the given system prompt). The texts are the
templates' own, checked byte for byte against the published templates in the renderer tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

from train_core.renderers.messages import Message


class FunctionSpec(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: dict[str, Any]
    """A JSON schema of the arguments object."""


class ToolSpec(TypedDict):
    """A tool as the OpenAI API and Hugging Face chat templates take it."""

    type: str
    function: FunctionSpec


def tools_json_lines(tools: Sequence[ToolSpec]) -> str:
    """One JSON object per tool and line, as the templates' `tool | tojson` writes them."""
    return "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)


def qwen3_tools_prompt(tools: Sequence[ToolSpec]) -> str:
    """Qwen3's (Hermes-style) tool declaration."""
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
        f"{tools_json_lines(tools)}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
        "<args-json-object>}\n</tool_call>"
    )


def qwen3_5_tools_prompt(tools: Sequence[ToolSpec]) -> str:
    """Qwen3.5's (and 3.6's, 3.8's) tool declaration, for its XML parameter call format."""
    return (
        "# Tools\n\nYou have access to the following functions:\n\n<tools>"
        f"{tools_json_lines(tools)}\n</tools>"
        "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
        "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
        "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
        "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
        "- Function calls MUST follow the specified format: an inner <function=...></function> block "
        "must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
        "- You may provide optional reasoning for your function call in natural language BEFORE the "
        "function call, but NOT after\n- If there is no function call available, answer the question "
        "like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>"
    )


def with_system_text(messages: Sequence[Message], declaration: str, *, before_system: bool) -> list[Message]:
    """The conversation whose system message (added when there is none) holds `declaration`,
    after the system prompt (`before_system=False`, Qwen3) or before it (Qwen3.5), two newlines
    apart. As the templates do, Qwen3 keeps even an empty system prompt's separator; Qwen3.5
    strips the system prompt and leaves an empty one out."""
    rest = list(messages)
    system = rest.pop(0)["content"] if rest and rest[0]["role"] == "system" else None
    if before_system:
        stripped = (system or "").strip()
        content = declaration + (f"\n\n{stripped}" if stripped else "")
    else:
        content = ("" if system is None else f"{system}\n\n") + declaration
    return [Message(role="system", content=content), *rest]
