"""hf_chat_template against the chat template shipped with the tiny model."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from renderer_cases import conversations, decode_text
from renderer_goldens import CHAT
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from adapters.common.tiny import TINY_DIR
from train_core.renderers import Message, RendererError, TrainOnWhat, get_renderer
from train_core.renderers.hf_chat_template import HfChatTemplateRenderer

PLAIN_CHAT = [Message(role=m["role"], content=m["content"]) for m in CHAT]
TEMPLATE_SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def as_hf(messages: list[Message]) -> list[dict[str, str]]:
    """The fields the tiny template reads."""
    return [{"role": m["role"], "content": m["content"]} for m in messages]


@TEMPLATE_SETTINGS
@given(data=st.data())
def test_tokens_are_the_templates_own(data: st.DataObject, tokenizer: PreTrainedTokenizerBase) -> None:
    conversation = data.draw(conversations("hf_chat_template"))
    renderer = get_renderer("hf_chat_template", tokenizer)
    history, messages = as_hf(conversation.history), as_hf(conversation.messages)
    prompt = tokenizer.apply_chat_template(history, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert renderer.build_generation_prompt(conversation.history).to_ints() == prompt
    example = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)
    assert renderer.build_supervised_example(conversation.messages)[0].to_ints() == example


def test_headers_are_untrained_and_bodies_trained(tokenizer: PreTrainedTokenizerBase) -> None:
    renderer = get_renderer("hf_chat_template", tokenizer)
    model_input, weights = renderer.build_supervised_example(PLAIN_CHAT, TrainOnWhat.ALL_MESSAGES)
    tokens = model_input.to_ints()
    untrained = decode_text(tokenizer, [t for t, w in zip(tokens, weights, strict=True) if not w])
    trained = decode_text(tokenizer, [t for t, w in zip(tokens, weights, strict=True) if w])
    assert untrained == "".join(f"<|im_start|>{m['role']}\n" for m in PLAIN_CHAT)
    assert trained == "".join(f"{m['content']}<|im_end|>\n" for m in PLAIN_CHAT)
    _, all_tokens = renderer.build_supervised_example(PLAIN_CHAT, TrainOnWhat.ALL_TOKENS)
    assert all_tokens == [1.0] * len(tokens)


def test_qwen3_instruct_writes_the_tiny_template_format(tokenizer: PreTrainedTokenizerBase) -> None:
    """The tiny template is ChatML, as qwen3_instruct renders it (which leaves off the newline after
    the last message, since that newline opens the next header)."""
    qwen = get_renderer("qwen3_instruct", tokenizer)
    template = get_renderer("hf_chat_template", tokenizer)
    assert qwen.build_generation_prompt(PLAIN_CHAT[:-1]) == template.build_generation_prompt(PLAIN_CHAT[:-1])
    qwen_text = decode_text(tokenizer, qwen.build_supervised_example(PLAIN_CHAT)[0].to_ints())
    template_text = decode_text(tokenizer, template.build_supervised_example(PLAIN_CHAT)[0].to_ints())
    assert qwen_text + "\n" == template_text


def _tiny_tokenizer_with(template: str | None) -> PreTrainedTokenizerBase:
    fresh = AutoTokenizer.from_pretrained(TINY_DIR)
    fresh.chat_template = template
    return fresh


def test_a_template_that_rewrites_earlier_messages_cannot_be_weighted() -> None:
    template = "{% for m in messages %}{% if loop.last %}LAST {% endif %}{{ m.content }}\n{% endfor %}"
    renderer = HfChatTemplateRenderer(_tiny_tokenizer_with(template))
    with pytest.raises(RendererError, match="first 1 messages differently"):
        renderer.build_supervised_example(PLAIN_CHAT[1:3])


def test_a_template_error_is_a_renderer_error() -> None:
    template = "{{ raise_exception('no system messages') }}"
    renderer = HfChatTemplateRenderer(_tiny_tokenizer_with(template))
    with pytest.raises(RendererError, match="no system messages"):
        renderer.build_generation_prompt(PLAIN_CHAT)


def test_a_tokenizer_without_a_template_is_refused() -> None:
    with pytest.raises(RendererError, match="chat_template"):
        HfChatTemplateRenderer(_tiny_tokenizer_with(None))


def test_only_assistant_messages_can_be_prompted(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(RendererError, match="'user'"):
        get_renderer("hf_chat_template", tokenizer).build_generation_prompt(PLAIN_CHAT[:2], role="user")
