"""What each built-in renderer can express, and hypothesis strategies for conversations it can
render: a history, then a last user turn (optionally with a tool round) and the reply to it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerBase

from train_core.renderers import Message, ToolCall
from train_core.renderers.deepseek_v4 import REASONING_BUDGETS, effort_line
from train_core.renderers.gpt_oss import system_prompt
from train_core.renderers.kimi_k2 import DEFAULT_SYSTEM_PROMPT
from train_core.renderers.qwen3_5 import REASONING_INSTRUCTIONS

GPT_OSS_DATE = "2025-06-28"


def decode_text(tokenizer: PreTrainedTokenizerBase, tokens: list[int]) -> str:
    text = tokenizer.decode(tokens)
    assert isinstance(text, str)
    return text


@dataclass(frozen=True)
class Capabilities:
    """thinking: on the reply, rendered ("kept"), silently not rendered ("dropped"), or an error.
    history_thinking: whether earlier assistant messages may carry thinking (rendered or dropped as
    the model's template does) where the reply's is an error.
    typed_string_arguments: string arguments are written raw, so one that reads as JSON ("3")
    comes back typed.
    tool_calls: how many calls an assistant message may hold ("one_alone": one call and no text).
    thinking_after_tool: whether a reply right after a tool result keeps its thinking.
    history_ends_with_stop: whether every assistant message, not just the reply, ends with a stop.
    """

    thinking: Literal["kept", "dropped", "rejected"]
    tool_calls: Literal["many", "one", "one_alone", "none"]
    renders_call_ids: bool = False
    thinking_after_tool: bool = True
    history_ends_with_stop: bool = True
    has_extension_property: bool = True
    history_thinking: bool = False
    typed_string_arguments: bool = False


CAPABILITIES: dict[str, Capabilities] = {
    "llama3": Capabilities("rejected", "one_alone"),
    "qwen3": Capabilities("kept", "many"),
    "qwen3_disable_thinking": Capabilities("rejected", "many", history_thinking=True),
    "qwen3_instruct": Capabilities("dropped", "many"),
    "role_colon": Capabilities("rejected", "none", history_ends_with_stop=False),
    "deepseekv3": Capabilities("dropped", "many"),
    "deepseekv3_disable_thinking": Capabilities("dropped", "many"),
    "deepseekv3_thinking": Capabilities("kept", "many", thinking_after_tool=False),
    "kimi_k2": Capabilities("kept", "many", renders_call_ids=True),
    "kimi_k25": Capabilities("kept", "many", renders_call_ids=True),
    "kimi_k25_disable_thinking": Capabilities("rejected", "many", renders_call_ids=True, history_thinking=True),
    "kimi_k26": Capabilities("kept", "many", renders_call_ids=True),
    "kimi_k26_disable_thinking": Capabilities("rejected", "many", renders_call_ids=True, history_thinking=True),
    "kimi_k26_preserve_thinking": Capabilities("kept", "many", renders_call_ids=True),
    "deepseekv4_1": Capabilities("kept", "many"),
    "deepseekv4_1_low_reasoning": Capabilities("kept", "many"),
    "deepseekv4_1_max_reasoning": Capabilities("kept", "many"),
    "deepseekv4_1_disable_thinking": Capabilities("dropped", "many"),
    "deepseekv4_1_preserve_thinking": Capabilities("kept", "many"),
    "glm5_3_max_reasoning": Capabilities("kept", "many", typed_string_arguments=True),
    "glm5_3_high_reasoning": Capabilities("kept", "many", typed_string_arguments=True),
    "glm5_3_low_reasoning": Capabilities("kept", "many", typed_string_arguments=True),
    **{
        name: Capabilities(
            "rejected" if "disable" in name else "kept",
            "many",
            history_thinking="disable" in name,
            typed_string_arguments=True,
            has_extension_property=False,
        )
        for name in (
            "nemotron3",
            "nemotron3_low_thinking",
            "nemotron3_disable_thinking",
            "nemotron3_preserve_thinking",
            "nemotron3_ultra",
            "nemotron3_ultra_disable_thinking",
            "nemotron3_ultra_medium_thinking",
            "nemotron3_ultra_preserve_thinking",
        )
    },
    "qwen3_5": Capabilities("kept", "many", typed_string_arguments=True),
    "qwen3_5_disable_thinking": Capabilities("rejected", "many", history_thinking=True, typed_string_arguments=True),
    "qwen3_5_preserve_thinking": Capabilities("kept", "many", typed_string_arguments=True),
    "qwen3_8_xhigh_reasoning": Capabilities("kept", "many", typed_string_arguments=True),
    "qwen3_8_medium_reasoning": Capabilities("kept", "many", typed_string_arguments=True),
    "qwen3_8_low_reasoning": Capabilities("kept", "many", typed_string_arguments=True),
    "qwen3_8_disable_thinking": Capabilities("rejected", "many", history_thinking=True, typed_string_arguments=True),
    "gpt_oss_no_sysprompt": Capabilities("kept", "one", history_ends_with_stop=False),
    "gpt_oss_low_reasoning": Capabilities("kept", "one", history_ends_with_stop=False),
    "gpt_oss_medium_reasoning": Capabilities("kept", "one", history_ends_with_stop=False),
    "gpt_oss_high_reasoning": Capabilities("kept", "one", history_ends_with_stop=False),
    "tml_v0": Capabilities("kept", "many"),
    "hf_chat_template": Capabilities("dropped", "none", has_extension_property=False),
}


FAMILY_REPRESENTATIVES = {"qwen3_5", "qwen3_8_xhigh_reasoning", "deepseekv4_1", "glm5_3_max_reasoning", "kimi_k25"}
FAMILY_REPRESENTATIVES |= {"nemotron3", "nemotron3_ultra"}
"""One renderer of each newer family whose hypothesis tests run in the fast tier; the family's
variants (effort levels, thinking off, preserved thinking) share its code and run marked slow."""
NEWER_FAMILIES = ("qwen3_5", "qwen3_8", "deepseekv4", "glm5", "kimi_k25", "kimi_k26", "nemotron3")


def by_tier(names: list[str]) -> list[Any]:
    """`names` as pytest params, the variants of a newer family marked slow."""
    return [
        pytest.param(n, marks=pytest.mark.slow)
        if n.startswith(NEWER_FAMILIES) and n not in FAMILY_REPRESENTATIVES
        else n
        for n in names
    ]


def expected_preamble(name: str, messages: list[Message]) -> str:
    """The text a renderer adds on its own, which is never trained, even under ALL_TOKENS."""
    if name == "llama3":
        return "<|begin_of_text|>"
    if name.startswith("deepseekv3") or name == "deepseekv4_1_disable_thinking":
        return "<｜begin▁of▁sentence｜>"
    if name.startswith("deepseekv4_1"):
        level = {"low": "low", "max": "max"}.get(name.split("_")[2] if name.count("_") > 1 else "", "high")
        return f"<｜begin▁of▁sentence｜><｜System｜>{effort_line(REASONING_BUDGETS[level])}"
    if name == "kimi_k2" and messages[0]["role"] != "system":
        return f"<|im_system|>system<|im_middle|>{DEFAULT_SYSTEM_PROMPT}<|im_end|>"
    if name.startswith("nemotron3") and messages[0]["role"] != "system":
        return "<|im_start|>system\n<|im_end|>"
    if name.startswith("glm5_3_"):
        glm_effort = name.removeprefix("glm5_3_").removesuffix("_reasoning").capitalize()
        return f"[gMASK]<sop><|system|>Reasoning Effort: {glm_effort}"
    for qwen_effort in ("xhigh", "low"):
        if name == f"qwen3_8_{qwen_effort}_reasoning" and messages[0]["role"] != "system":
            return f"<|im_start|>system\n{REASONING_INSTRUCTIONS[qwen_effort]}<|im_end|>"
    if name == "tml_v0":  # after the leading system messages, but the only untrained part
        return "<|message_system|><|content_text|>Thinking effort level: 0.9<|end_message|>"
    for effort in ("low", "medium", "high"):
        if name == f"gpt_oss_{effort}_reasoning":
            return f"<|start|>system<|message|>{system_prompt(effort, GPT_OSS_DATE)}<|end|>"
    return ""


def expected_parse(name: str, reply: Message, after_tool: bool) -> Message:
    """The reply as parse_response gives it back: thinking only where the format keeps it, call
    ids only where the format writes them."""
    caps = CAPABILITIES[name]
    parsed = Message(role="assistant", content=reply["content"])
    keeps_thinking = caps.thinking == "kept" and (caps.thinking_after_tool or not after_tool)
    if reply.get("thinking") and keeps_thinking:
        parsed["thinking"] = reply["thinking"]
    if calls := reply.get("tool_calls"):
        parsed["tool_calls"] = [
            ToolCall(name=c["name"], arguments=_read_back(c["arguments"], caps), id=f"functions.{c['name']}:{j}")
            if caps.renders_call_ids
            else ToolCall(name=c["name"], arguments=_read_back(c["arguments"], caps))
            for j, c in enumerate(calls)
        ]
    return parsed


def _read_back(arguments: dict[str, Any], caps: Capabilities) -> dict[str, Any]:
    if not caps.typed_string_arguments:
        return arguments
    return {key: _json_or_text(value) if isinstance(value, str) else value for key, value in arguments.items()}


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


_words = st.text(alphabet="abcdefgh XYZ.,?!'é漢0123", min_size=1, max_size=10).map(str.strip).filter(bool)
_arguments = st.dictionaries(st.sampled_from(["city", "unit", "days"]), st.one_of(_words, st.integers(-5, 99)))
_tool_names = st.sampled_from(["get_weather", "search", "add"])


@dataclass
class Conversation:
    """`history` ends with the last user message or the tool results that follow it; `reply` is the
    assistant message that answers it. Every content is tagged `[i]` with its position."""

    history: list[Message]
    reply: Message

    @property
    def messages(self) -> list[Message]:
        return [*self.history, self.reply]

    @property
    def reply_follows_tool(self) -> bool:
        return self.history[-1]["role"] == "tool"


@st.composite
def conversations(draw: st.DrawFn, name: str) -> Conversation:
    caps = CAPABILITIES[name]
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(Message(role="system", content=draw(_words)))
    for _ in range(draw(st.integers(0, 2))):
        messages.append(Message(role="user", content=draw(_words)))
        if caps.tool_calls != "none" and draw(st.booleans()):
            messages += draw(_tool_round(caps))
        messages.append(draw(_assistant(caps, with_calls=False, in_history=True)))
    messages.append(Message(role="user", content=draw(_words)))
    if caps.tool_calls != "none" and draw(st.booleans()):
        messages += draw(_tool_round(caps))
    messages.append(draw(_assistant(caps, with_calls=caps.tool_calls != "none" and draw(st.booleans()))))
    for i, message in enumerate(messages):
        if message["content"] or not message.get("tool_calls"):
            message["content"] = f"[{i}] {message['content']}"
    return Conversation(messages[:-1], messages[-1])


@st.composite
def _tool_round(draw: st.DrawFn, caps: Capabilities) -> list[Message]:
    call_message = draw(_assistant(caps, with_calls=True, in_history=True))
    results = [
        Message(role="tool", content=draw(_words), name=call["name"], tool_call_id=f"functions.{call['name']}:{j}")
        for j, call in enumerate(call_message.get("tool_calls", []))
    ]
    return [call_message, *results]


@st.composite
def _assistant(draw: st.DrawFn, caps: Capabilities, with_calls: bool, in_history: bool = False) -> Message:
    message = Message(role="assistant", content=draw(_words))
    if (caps.thinking != "rejected" or (in_history and caps.history_thinking)) and draw(st.booleans()):
        message["thinking"] = draw(_words)
    if with_calls:
        count = draw(st.integers(1, 2)) if caps.tool_calls == "many" else 1
        message["tool_calls"] = [ToolCall(name=draw(_tool_names), arguments=draw(_arguments)) for _ in range(count)]
        if caps.tool_calls == "one_alone" or draw(st.booleans()):
            message["content"] = ""
    return message
