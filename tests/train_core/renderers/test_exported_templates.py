"""The chat templates `kitchen export` writes reproduce their renderers byte for byte (through
transformers' own `apply_chat_template`), and refuse what they do not render."""

from __future__ import annotations

from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerBase

from train_core.renderers import Message, get_renderer
from train_core.renderers.exported_templates import EXPORTED_CHAT_TEMPLATES, exported_chat_template

CONVERSATIONS: list[list[Message]] = [
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?\nThink."},
        {"role": "assistant", "content": " 6. \n"},
    ],
    [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}, {"role": "user", "content": "c"}],
    [{"role": "user", "content": "q"}, {"role": "assistant", "content": "\n\nleading newlines"}],
]
WITH_TOOL_RESULT: list[Message] = [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "Let me look."},
    {"role": "tool", "content": '{"temp": 20}'},
    {"role": "tool", "content": '{"wind": 3}'},
    {"role": "assistant", "content": "20 degrees."},
]
TOOL_RESULTS = ("llama3", "qwen3_instruct", "qwen3_disable_thinking", "deepseekv3", "deepseekv3_disable_thinking")


def _template_text(
    tokenizer: PreTrainedTokenizerBase, name: str, messages: list[Message], add_generation_prompt: bool
) -> str:
    text = tokenizer.apply_chat_template(
        cast(Any, messages),
        chat_template=EXPORTED_CHAT_TEMPLATES[name],
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
    )
    assert isinstance(text, str)
    return text


def _assert_same(tokenizer: PreTrainedTokenizerBase, name: str, messages: list[Message]) -> None:
    renderer = get_renderer(name, tokenizer)
    supervised, _ = renderer.build_supervised_example(messages)
    assert _template_text(tokenizer, name, messages, False) == tokenizer.decode(supervised.to_ints())
    if messages[-1]["role"] == "assistant":
        prompt = renderer.build_generation_prompt(messages[:-1])
        assert _template_text(tokenizer, name, messages[:-1], True) == tokenizer.decode(prompt.to_ints())


@pytest.mark.parametrize("name", sorted(EXPORTED_CHAT_TEMPLATES))
def test_template_equals_renderer(name: str, tokenizer: PreTrainedTokenizerBase) -> None:
    cases = [*CONVERSATIONS, *([WITH_TOOL_RESULT] if name in TOOL_RESULTS else [])]
    for messages in cases:
        _assert_same(tokenizer, name, messages)


_TEXT = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126) | st.sampled_from("\n\té"), max_size=30)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(sorted(EXPORTED_CHAT_TEMPLATES)),
    system=st.none() | _TEXT,
    turns=st.lists(st.tuples(_TEXT, _TEXT), min_size=1, max_size=3),
)
def test_template_equals_renderer_on_any_text(
    name: str, system: str | None, turns: list[tuple[str, str]], tokenizer: PreTrainedTokenizerBase
) -> None:
    messages: list[Message] = [{"role": "system", "content": system}] if system is not None else []
    for question, answer in turns:
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    _assert_same(tokenizer, name, messages)


@pytest.mark.parametrize("name", sorted(EXPORTED_CHAT_TEMPLATES))
def test_template_refuses_what_it_does_not_render(name: str, tokenizer: PreTrainedTokenizerBase) -> None:
    call = {"name": "f", "arguments": {"x": 1}}
    for message in (
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "assistant", "content": "a", "thinking": "t"},
    ):
        with pytest.raises(Exception, match="does not render"):
            _template_text(tokenizer, name, [{"role": "user", "content": "q"}, message], False)  # type: ignore[list-item]


def test_renderers_without_a_template() -> None:
    assert exported_chat_template("kimi_k2") is None and exported_chat_template("qwen3") is None
    assert exported_chat_template("role_colon") is not None
