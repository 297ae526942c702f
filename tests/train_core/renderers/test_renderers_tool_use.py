"""Tool use through the renderers: tools declared as the models' own templates declare them, and
tool calls that round-trip (render, then parse) in every renderer with a tool-call format."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from official_templates import CHECKS, template
from renderer_cases import CAPABILITIES, by_tier, conversations, decode_text, expected_parse
from transformers import PreTrainedTokenizerBase

from train_core.renderers import Message, RendererError, ToolCall, ToolSpec, check_tool_renderer, get_renderer
from train_core.renderers.hf_chat_template import _to_hf
from train_core.renderers.registry import renderer_declares_tools, renderer_names

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
DECLARING = [name for name in renderer_names() if renderer_declares_tools(name)]
WITH_CALL_FORMAT = [name for name, caps in CAPABILITIES.items() if caps.tool_calls != "none"]

_identifiers = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
_json_scalars = st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.text("abc xyz.,é漢", max_size=8)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_identifiers, inner, max_size=3),
    max_leaves=6,
)
_tool_specs = st.lists(
    st.builds(
        lambda name, description, props: ToolSpec(
            type="function",
            function={
                "name": name,
                "description": description,
                "parameters": {"type": "object", "properties": {p: {"type": "string"} for p in props}},
            },
        ),
        _identifiers,
        st.text("abc xyz.,é漢\n", max_size=20),
        st.lists(_identifiers, max_size=3),
    ),
    min_size=1,
    max_size=3,
)


TEMPLATE_DECLARED = sorted(name for name in CHECKS if name.startswith("qwen3") and "_vl" not in name)
"""The renderers whose template declares tools as the renderer does (Qwen3, 3.5/3.6, 3.8)."""


def render_template_with_tools(name: str, messages: list[Message], tools: list[ToolSpec]) -> str:
    check = CHECKS[name]
    hf_messages = [_to_hf(m) for m in messages]
    return template(check.file).render(messages=hf_messages, tools=tools, add_generation_prompt=True, **check.options)


def test_every_qwen_renderer_declares_tools_and_others_do_not() -> None:
    assert set(TEMPLATE_DECLARED) <= set(DECLARING)
    assert "qwen3_instruct" in DECLARING
    assert not {"role_colon", "hf_chat_template", "llama3"} & set(DECLARING)


@pytest.mark.parametrize("name", ["role_colon", "hf_chat_template", "llama3", "gpt_oss_medium_reasoning"])
def test_a_renderer_without_a_tool_declaration_is_refused_by_name(name: str) -> None:
    with pytest.raises(RendererError, match=f"renderer '{name}' has no native tool format.*qwen3"):
        check_tool_renderer(name)


@pytest.mark.parametrize("name", by_tier(TEMPLATE_DECLARED))
@SETTINGS
@given(data=st.data())
def test_declared_tools_render_as_the_template_with_tools(
    name: str, data: st.DataObject, tokenizer: PreTrainedTokenizerBase
) -> None:
    """With or without a system prompt (the drawn history may start with one), and with the tool
    rounds the conversation holds."""
    history = data.draw(conversations(name)).history
    tools = data.draw(_tool_specs)
    renderer = get_renderer(name, tokenizer)
    prompt = renderer.build_generation_prompt(renderer.declare_tools(history, tools)).to_ints()
    assert decode_text(tokenizer, prompt) == render_template_with_tools(name, history, tools)


def test_an_empty_system_prompt_is_written_as_the_qwen3_template_writes_it(tokenizer: PreTrainedTokenizerBase) -> None:
    tools = [ToolSpec(type="function", function={"name": "f", "parameters": {"type": "object"}})]
    history = [Message(role="system", content=""), Message(role="user", content="hi")]
    renderer = get_renderer("qwen3", tokenizer)
    prompt = renderer.build_generation_prompt(renderer.declare_tools(history, tools)).to_ints()
    assert decode_text(tokenizer, prompt) == render_template_with_tools("qwen3", history, tools)


def _top_level_values(name: str) -> st.SearchStrategy[object]:
    """Nemotron's template writes a top-level scalar argument with Jinja's `string` filter, so
    None and booleans come back as the strings "None", "True": a limit of the format itself."""
    if name.startswith("nemotron3"):
        return _json_values.filter(lambda v: v is not None and not isinstance(v, bool))
    return _json_values


@st.composite
def _calls_reply(draw: st.DrawFn, name: str) -> Message:
    caps = CAPABILITIES[name]
    count = draw(st.integers(1, 3)) if caps.tool_calls == "many" else 1
    arguments = st.dictionaries(_identifiers, _top_level_values(name), max_size=4)
    calls = [ToolCall(name=draw(_identifiers), arguments=draw(arguments)) for _ in range(count)]
    content = "" if caps.tool_calls == "one_alone" else draw(st.sampled_from(["", "Let me check."]))
    return Message(role="assistant", content=content, tool_calls=calls)


@pytest.mark.parametrize("name", by_tier(sorted(WITH_CALL_FORMAT)))
@SETTINGS
@given(data=st.data())
def test_tool_calls_round_trip_through_render_and_parse(
    name: str, data: st.DataObject, tokenizer: PreTrainedTokenizerBase
) -> None:
    """Any call names and nested JSON arguments: the reply's rendered tokens parse back to it (up
    to what the format cannot tell apart, see `expected_parse`), with tools declared where the
    renderer declares them."""
    renderer = get_renderer(name, tokenizer)
    history = [Message(role="user", content="Look it up.")]
    if renderer.declares_tools:
        history = renderer.declare_tools(history, data.draw(_tool_specs))
    reply = data.draw(_calls_reply(name))
    model_input, weights = renderer.build_supervised_example([*history, reply])
    reply_tokens = [t for t, w in zip(model_input.to_ints(), weights, strict=True) if w]
    assert renderer.parse_response(reply_tokens) == (expected_parse(name, reply, after_tool=False), True)
    if CAPABILITIES[name].has_extension_property:
        prompt = renderer.build_generation_prompt(history).to_ints()
        assert model_input.to_ints()[: len(prompt)] == prompt


# Malformed calls in the declaring formats, as the text a model emitted before its stop token.
MALFORMED_CALLS: dict[str, list[str]] = {
    "qwen3_instruct": [
        '<tool_call>\n{"name": "f", "arguments": {"x": 1}\n</tool_call>',  # a brace short
        '<tool_call>\n{"arguments": {"x": 1}}\n</tool_call>',  # no name
        '<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>',  # arguments not an object
        '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call> trailing words',
        '<tool_call>\n{"name": "f", "arguments": {}}',  # never closed
    ],
    "qwen3_5": [
        "<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</tool_call>",  # no </function>
        "<tool_call>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>",  # no <function=...>
        "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>",  # parameter not closed
    ],
}


@pytest.mark.parametrize(("name", "raw"), [(n, raw) for n, raws in MALFORMED_CALLS.items() for raw in raws])
def test_malformed_calls_are_reported_not_ok_with_the_raw_text(
    name: str, raw: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    renderer = get_renderer(name, tokenizer)
    tokens = tokenizer.encode(raw + "<|im_end|>", add_special_tokens=False)
    message, ok = renderer.parse_response(tokens)
    assert not ok and message == {"role": "assistant", "content": raw}
