"""Renderers against the models' own published chat templates, byte for byte.

The templates in `chat_templates/` are the models' (Qwen3-8B's, Qwen3.6's for the Qwen3.5 family,
Qwen3.8's), rendered here by a tokenizer-free jinja2 environment set up as Hugging Face's
`apply_chat_template` sets up its own (sandboxed, `trim_blocks`, `lstrip_blocks`,
`raise_exception`, `tojson`). On random conversations (hypothesis) a renderer's generation
prompt is the template's with `add_generation_prompt`, and its supervised example is the
template's rendering of the whole conversation, less the newline the template writes after the
last `<|im_end|>` (it opens the next message's header, so the renderer writes it with that)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment
from renderer_cases import by_tier, conversations, decode_text
from renderer_goldens import CONVERSATIONS
from transformers import PreTrainedTokenizerBase

from train_core.renderers import Message, get_renderer
from train_core.renderers.hf_chat_template import _to_hf

TEMPLATES = Path(__file__).parent / "chat_templates"
# renderer -> (template file, the template options it renders with)
RENDERED_AS: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen3": ("qwen3.jinja", {}),
    "qwen3_disable_thinking": ("qwen3.jinja", {"enable_thinking": False}),
    "qwen3_5": ("qwen3_6.jinja", {}),
    "qwen3_5_disable_thinking": ("qwen3_6.jinja", {"enable_thinking": False}),
    "qwen3_5_preserve_thinking": ("qwen3_6.jinja", {"preserve_thinking": True}),
    "qwen3_8_xhigh_reasoning": ("qwen3_8.jinja", {}),
    "qwen3_8_medium_reasoning": ("qwen3_8.jinja", {"reasoning_effort": "medium"}),
    "qwen3_8_low_reasoning": ("qwen3_8.jinja", {"reasoning_effort": "low"}),
    "qwen3_8_disable_thinking": ("qwen3_8.jinja", {"enable_thinking": False}),
}
TEMPLATE_SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kwargs: Any) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kwargs)


@functools.cache
def template(file: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    return env.from_string((TEMPLATES / file).read_text(encoding="utf-8"))


def render_template(name: str, messages: list[Message], add_generation_prompt: bool) -> str:
    file, options = RENDERED_AS[name]
    hf_messages = [_to_hf(m) for m in messages]
    return template(file).render(messages=hf_messages, add_generation_prompt=add_generation_prompt, **options)


def check(name: str, history: list[Message], messages: list[Message], tokenizer: PreTrainedTokenizerBase) -> None:
    renderer = get_renderer(name, tokenizer)
    prompt = decode_text(tokenizer, renderer.build_generation_prompt(history).to_ints())
    assert prompt == render_template(name, history, add_generation_prompt=True)
    example = decode_text(tokenizer, renderer.build_supervised_example(messages)[0].to_ints())
    assert example + "\n" == render_template(name, messages, add_generation_prompt=False)


@pytest.mark.parametrize("name", sorted(RENDERED_AS))
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
def test_the_golden_conversations_render_as_the_template(
    name: str, conversation: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    messages = CONVERSATIONS[conversation]
    if name.endswith("disable_thinking"):  # the reply may not reason; earlier messages may
        messages = [*messages[:-1], Message(role="assistant", content=messages[-1]["content"])]
    check(name, messages[:-1], messages, tokenizer)


@pytest.mark.parametrize("name", by_tier(sorted(RENDERED_AS)))
@TEMPLATE_SETTINGS
@given(data=st.data())
def test_random_conversations_render_as_the_template(
    name: str, data: st.DataObject, tokenizer: PreTrainedTokenizerBase
) -> None:
    conversation = data.draw(conversations(name))
    check(name, conversation.history, conversation.messages, tokenizer)
