"""Tool-call payload helpers, and every renderer's handling of malformed model output."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from renderer_cases import CAPABILITIES, by_tier
from transformers import PreTrainedTokenizerBase

from train_core.renderers import Message, RendererError, ToolCall, get_renderer
from train_core.renderers.registry import tool_renderer_names
from train_core.renderers.tool_calls import (
    decode_arguments,
    decode_named_call,
    encode_arguments,
    encode_named_call,
    match_calls,
)

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
_arguments = st.dictionaries(st.text(max_size=6), _json_values, max_size=4)


def test_arguments_are_written_as_chat_templates_write_json() -> None:
    assert encode_arguments({"city": "Zürich", "days": [1, 2]}) == '{"city": "Zürich", "days": [1, 2]}'


@given(_arguments)
def test_arguments_round_trip(arguments: dict[str, object]) -> None:
    assert decode_arguments(encode_arguments(arguments)) == arguments


@pytest.mark.parametrize("text", ['{"city": "Paris"', "[1, 2]", '"text"', "", "{'city': 1}"])
def test_anything_but_a_json_object_decodes_to_none(text: str) -> None:
    assert decode_arguments(text) is None


@pytest.mark.parametrize("key", ["arguments", "parameters"])
@given(name=st.text(min_size=1, max_size=8), arguments=_arguments)
def test_named_calls_round_trip(key: str, name: str, arguments: dict[str, object]) -> None:
    call = ToolCall(name=name, arguments=arguments)
    text = encode_named_call(call, key)
    assert json.loads(text) == {"name": name, key: arguments}
    assert decode_named_call(text, key) == call


@pytest.mark.parametrize(
    "text", ['{"arguments": {}}', '{"name": 3, "arguments": {}}', '{"name": "f", "arguments": [1]}', "{"]
)
def test_a_payload_that_is_not_a_named_call_decodes_to_none(text: str) -> None:
    assert decode_named_call(text) is None


def test_match_calls_needs_only_calls_and_whitespace() -> None:
    call_re = re.compile(r"<c>(.*?)</c>")
    assert match_calls(call_re, "<c>a</c>\n<c>b</c> ") == [("a",), ("b",)]
    assert match_calls(call_re, "<c>a</c> stray") is None
    assert match_calls(call_re, "<c>a") is None


# The text a model emitted before its stop token; each holds a malformed tool call.
MALFORMED_OUTPUTS: dict[str, tuple[str, str]] = {
    "llama3": ('{"name": "f", "parameters": {"x": }', "<|eot_id|>"),
    "qwen3": ('<think>\nhm\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {x}\n</tool_call>', "<|im_end|>"),
    "qwen3_instruct": ('Sure.\n<tool_call>\n{"name": "f", "arguments": {}}', "<|im_end|>"),
    "deepseekv3": (
        "ok</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{x<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<｜end▁of▁sentence｜>",
    ),
    "deepseekv3_disable_thinking": (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜>",
        "<｜end▁of▁sentence｜>",
    ),
    "kimi_k2": (
        "<think></think><|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
        "<|tool_call_argument_begin|>{x<|tool_call_end|><|tool_calls_section_end|>",
        "<|im_end|>",
    ),
    "gpt_oss_medium_reasoning": (" to=functions.f<|channel|>commentary <|constrain|>json<|message|>{x", "<|call|>"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_OUTPUTS))
def test_malformed_tool_calls_keep_the_raw_text_and_report_not_ok(
    name: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    renderer = get_renderer(name, tokenizer)
    raw, stop = MALFORMED_OUTPUTS[name]
    message, ok = renderer.parse_response(tokenizer.encode(raw + stop, add_special_tokens=False))
    assert (message, ok) == ({"role": "assistant", "content": raw}, False)


@pytest.mark.parametrize("name", by_tier(sorted(CAPABILITIES)))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_parse_response_never_raises_on_arbitrary_tokens(
    name: str, data: st.DataObject, tokenizer: PreTrainedTokenizerBase
) -> None:
    renderer = get_renderer(name, tokenizer)
    special_ids = tokenizer.all_special_ids
    tokens = data.draw(st.lists(st.sampled_from(special_ids) | st.integers(0, len(tokenizer) - 1), max_size=40))
    message, ok = renderer.parse_response(tokens)
    assert message["role"] == "assistant" and isinstance(ok, bool)


def test_gpt_oss_parses_the_recipient_after_the_channel_too(tokenizer: PreTrainedTokenizerBase) -> None:
    """Harmony lets the model put `to=` in the channel part of the header."""
    renderer = get_renderer("gpt_oss_no_sysprompt", tokenizer)
    output = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>'
    message, ok = renderer.parse_response(tokenizer.encode(output, add_special_tokens=False))
    assert ok and message == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}],
    }


def test_kimi_keeps_the_call_id_it_was_given(tokenizer: PreTrainedTokenizerBase) -> None:
    renderer = get_renderer("kimi_k2", tokenizer)
    output = (
        "<think>x</think><|tool_calls_section_begin|><|tool_call_begin|>functions.search:3"
        '<|tool_call_argument_begin|>{"q": "a"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>'
    )
    message, ok = renderer.parse_response(tokenizer.encode(output, add_special_tokens=False))
    assert ok and message["tool_calls"] == [{"name": "search", "arguments": {"q": "a"}, "id": "functions.search:3"}]


@pytest.mark.parametrize("forced", [None, "get_weather"])
@pytest.mark.parametrize("name", tool_renderer_names())
def test_a_tool_call_prefill_opens_the_reply_as_the_format_writes_a_call(
    tokenizer: PreTrainedTokenizerBase, name: str, forced: str | None
) -> None:
    """The generation prompt with the prefill is a prefix of the conversation with the call
    rendered, and the prefill plus the rest of that rendering parses back to the call."""
    renderer = get_renderer(name, tokenizer)
    history = [Message(role="user", content="Weather in Paris?")]
    reply = Message(
        role="assistant", content="", tool_calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})]
    )
    full_text = str(tokenizer.decode(renderer.build_supervised_example([*history, reply])[0].to_ints()))
    plain = renderer.build_generation_prompt(history).to_ints()
    prompt = renderer.build_generation_prompt(history, prefill=renderer.tool_call_prefill(forced)).to_ints()
    prompt_text = str(tokenizer.decode(prompt))
    assert full_text.startswith(prompt_text) and prompt[: len(plain)] == plain
    if forced:
        assert prompt_text.endswith(renderer.tool_call_prefill(forced)) and forced in prompt_text[-40:]
    rest = tokenizer.encode(full_text[len(prompt_text) :], add_special_tokens=False)
    assert renderer.parse_response(prompt[len(plain) :] + rest) == (reply, True)


def test_a_renderer_without_a_tool_format_has_no_tool_call_prefill(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(RendererError, match="no native tool format to force a tool call"):
        get_renderer("role_colon", tokenizer).tool_call_prefill()
