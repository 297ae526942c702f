"""Every renderer against its model's published chat template, on generated conversations.

For each renderer with a template (`official_templates.CHECKS`; the families without one are listed in
`chat_templates/SOURCES.md`), hypothesis draws conversations (whitespace, empty and non-ASCII text,
several system messages, tool calls with and without text, tool results, reasoning on current and
earlier turns, multi-turn tool loops, images where the family takes them). For every assistant
message in one, the generation prompt before it and the supervised example ending with it are
rendered by the renderer (tokens, decoded) and by the template (jinja2, with the template's own
options): the texts are equal, but for the named differences (`Difference`), each rewriting the
template's text where it applies or naming a rendering the renderer refuses. Where the template
raises, the renderer must refuse too."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from official_templates import (
    CHECKS,
    TEMPLATES,
    Rendering,
    TemplateCheck,
    conversations,
    differences,
    make_renderer,
    shape,
)
from renderer_goldens import CONVERSATIONS
from transformers import PreTrainedTokenizerBase

from adapters.common.tiny import TINY_VL_MODEL_NAME
from adapters.common.tokenizer import load_tokenizer
from train_core.renderers import Message, RendererError, ToolCall
from train_core.renderers.base import Renderer
from train_core.renderers.registry import renderer_takes_images
from train_core.renderers.tokenizer import Tokenizer
from train_core.types import ImageChunk, ModelInput

EXAMPLES = 200
"""Conversations per renderer in the full tier; the fast tier draws `FAST_EXAMPLES` for one renderer
of each template (`FAST`)."""
FAST_EXAMPLES = 25
FAST = {"llama3", "qwen3", "qwen3_5", "qwen3_8_xhigh_reasoning", "qwen3_vl", "qwen3_vl_instruct"}
FAST |= {"deepseekv3_thinking", "kimi_k2", "kimi_k25", "gpt_oss_medium_reasoning", "nemotron3", "nemotron3_ultra"}
NEMOTRON = sorted(name for name in CHECKS if name.startswith("nemotron3"))


@pytest.fixture(scope="module")
def vl_tokenizer() -> PreTrainedTokenizerBase:
    tokenizer = load_tokenizer(TINY_VL_MODEL_NAME)
    assert isinstance(tokenizer, PreTrainedTokenizerBase)
    return tokenizer


def text_of(model_input: ModelInput, tokenizer: Tokenizer) -> str:
    """The decoded text, an image as the one `<|image_pad|>` a template writes for it."""
    return "".join(
        "<|image_pad|>" if isinstance(chunk, ImageChunk) else str(tokenizer.decode(list(chunk.tokens)))
        for chunk in model_input.chunks
    )


def render(renderer: Renderer, rendering: Rendering) -> str:
    if rendering.add_generation_prompt:
        return text_of(renderer.build_generation_prompt(rendering.messages), renderer.tokenizer)
    return text_of(renderer.build_supervised_example(rendering.messages)[0], renderer.tokenizer)


def compare(renderer: Renderer, check: TemplateCheck, rendering: Rendering) -> None:
    expected = check.expected(rendering)
    if isinstance(expected, list):  # the renderer must refuse, for these named reasons
        with pytest.raises(RendererError):
            render(renderer, rendering)
    else:
        assert render(renderer, rendering) == expected


def check_conversations(name: str, tokenizer: Tokenizer, examples: int) -> None:
    """For every assistant message of each drawn conversation: the generation prompt before it and
    the supervised example ending with it, against the template."""
    renderer, check = make_renderer(name, tokenizer), CHECKS[name]

    @settings(max_examples=examples, deadline=None)
    @given(messages=conversations(shape(name)))
    def renders_as_the_template(messages: list[Message]) -> None:
        for k, message in enumerate(messages):
            if message["role"] == "assistant":
                compare(renderer, check, Rendering(messages[:k], add_generation_prompt=True))
                compare(renderer, check, Rendering(messages[: k + 1], add_generation_prompt=False))

    renders_as_the_template()


def tokenizer_for(name: str, tokenizer: Tokenizer, vl_tokenizer: Tokenizer) -> Tokenizer:
    return vl_tokenizer if renderer_takes_images(name) else tokenizer


@pytest.mark.parametrize("name", sorted(FAST))
def test_renderings_equal_the_official_template_quick(
    name: str, tokenizer: PreTrainedTokenizerBase, vl_tokenizer: PreTrainedTokenizerBase
) -> None:
    check_conversations(name, tokenizer_for(name, tokenizer, vl_tokenizer), FAST_EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_renderings_equal_the_official_template(
    name: str, tokenizer: PreTrainedTokenizerBase, vl_tokenizer: PreTrainedTokenizerBase
) -> None:
    check_conversations(name, tokenizer_for(name, tokenizer, vl_tokenizer), EXAMPLES)


@pytest.mark.parametrize("name", sorted(CHECKS))
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
def test_the_golden_conversations_render_as_the_template(
    name: str, conversation: str, tokenizer: PreTrainedTokenizerBase, vl_tokenizer: PreTrainedTokenizerBase
) -> None:
    """The hand-written conversations of the golden tests (a thinking-disabled renderer's reply does
    not reason), as a generation prompt and as a supervised example."""
    messages = CONVERSATIONS[conversation]
    if "disable_thinking" in name:
        messages = [*messages[:-1], Message(role="assistant", content=messages[-1]["content"])]
    renderer = make_renderer(name, tokenizer_for(name, tokenizer, vl_tokenizer))
    compare(renderer, CHECKS[name], Rendering(messages[:-1], add_generation_prompt=True))
    compare(renderer, CHECKS[name], Rendering(messages, add_generation_prompt=False))


@pytest.mark.parametrize("name", NEMOTRON)
def test_nemotron_writes_user_system_and_tool_text_as_given(name: str, tokenizer: PreTrainedTokenizerBase) -> None:
    """Regression (issue 46): the Nemotron-3 templates write user, system and tool text unchanged and
    trim only the assistant's; the renderers used to strip every message."""
    messages = [
        Message(role="system", content="  Be brief.  "),
        Message(role="user", content="  spaced  "),
        Message(role="assistant", content=" I check. ", tool_calls=[ToolCall(name="get_weather", arguments={})]),
        Message(role="tool", content="  sunny \n"),
        Message(role="assistant", content="  Sunny.  "),
    ]
    renderer = make_renderer(name, tokenizer)
    text = render(renderer, Rendering(messages, add_generation_prompt=False))
    suffix = {"nemotron3_low_thinking": "\n\n{reasoning effort: low}"}.get(name, "")
    suffix = {"nemotron3_ultra_medium_thinking": "\n\n{reasoning effort: efficient}"}.get(name, suffix)
    assert text.startswith(
        f"<|im_start|>system\n  Be brief.  <|im_end|>\n<|im_start|>user\n  spaced  {suffix}<|im_end|>"
    )
    assert "<tool_response>\n  sunny \n\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n<think></think>  Sunny.<|im_end|>")
    assert text + "\n" == CHECKS[name].expected(Rendering(messages, add_generation_prompt=False)) + "\n"


def test_every_template_is_the_recorded_one() -> None:
    """Each template file is listed in SOURCES.md with its source and the SHA-256 of its bytes."""
    table = (TEMPLATES / "SOURCES.md").read_text(encoding="utf-8")
    recorded = dict(re.findall(r"^\| `([\w.]+\.jinja)` \|.*\| `([0-9a-f]{64})` \|$", table, re.MULTILINE))
    files = {path.name: path for path in Path(TEMPLATES).glob("*.jinja")}
    assert set(recorded) == set(files)
    for file, digest in recorded.items():
        assert hashlib.sha256(files[file].read_bytes()).hexdigest() == digest, file
    assert {check.file for check in CHECKS.values()} == set(files)


def test_every_named_difference_and_checked_renderer_is_documented() -> None:
    page = (Path(__file__).parents[3] / "docs" / "reference" / "renderers.md").read_text(encoding="utf-8")
    checked = page[page.index("## Checked against the models' chat templates") :]
    named = {name for code in re.findall(r"`([^`]+)`", checked) for name in _expanded(code)}
    assert set(differences()) <= named
    assert set(CHECKS) <= named


def _expanded(code: str) -> list[str]:
    """`qwen3_8_{xhigh,medium}_reasoning` as the names it stands for."""
    match = re.search(r"\{([^}]*)\}", code)
    if match is None:
        return [code]
    return [n for part in match[1].split(",") for n in _expanded(code[: match.start()] + part + code[match.end() :])]
