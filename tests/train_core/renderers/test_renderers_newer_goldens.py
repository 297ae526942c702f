"""The renderers of the newer model families, character for character, on the CHAT and TOOLS
conversations (`renderer_goldens`; a thinking-disabled renderer's reply does not reason, its
history still does).

`newer_goldens.json` holds each renderer's supervised example, the part of it trained under
LAST_ASSISTANT_MESSAGE, and the generation prompt for the conversation without its reply. Every
entry was checked against tinker-cookbook 0.6.1's rendering of the same conversation on the same
tokenizer (`test_renderers_cookbook_parity.py` repeats that live where the cookbook is
installed), except `qwen3_5` and `qwen3_5_disable_thinking` on TOOLS, where the renderer follows
the Qwen3.6 template instead (the tool-calling step keeps its reasoning), which
`test_renderers_official_templates.py` checks byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest
from renderer_cases import decode_text
from renderer_goldens import CONVERSATIONS
from transformers import PreTrainedTokenizerBase

from train_core.renderers import Message, get_renderer

NEWER_GOLDENS: dict[str, dict[str, str]] = json.loads(
    (Path(__file__).parent / "newer_goldens.json").read_text(encoding="utf-8")
)


def conversation_for(name: str, conversation: str) -> list[Message]:
    messages = CONVERSATIONS[conversation]
    if "disable_thinking" not in name:
        return messages
    reply = cast(Message, {k: v for k, v in messages[-1].items() if k != "thinking"})
    return [*messages[:-1], reply]


CASES = [(name, conversation) for name in sorted(NEWER_GOLDENS) for conversation in CONVERSATIONS]


@pytest.mark.parametrize(("name", "conversation"), CASES)
def test_supervised_example_and_prompt_match_golden(
    name: str, conversation: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    renderer = get_renderer(name, tokenizer)
    messages = conversation_for(name, conversation)
    golden = NEWER_GOLDENS[name]
    model_input, weights = renderer.build_supervised_example(messages)
    tokens = model_input.to_ints()
    assert decode_text(tokenizer, tokens) == golden[f"{conversation}_supervised"]
    trained = [t for t, w in zip(tokens, weights, strict=True) if w]
    assert decode_text(tokenizer, trained) == golden[f"{conversation}_trained"]
    prompt = renderer.build_generation_prompt(messages[:-1]).to_ints()
    assert decode_text(tokenizer, prompt) == golden[f"{conversation}_prompt"]


@pytest.mark.parametrize("name", sorted(NEWER_GOLDENS))
def test_the_reply_parses_back(name: str, tokenizer: PreTrainedTokenizerBase) -> None:
    renderer = get_renderer(name, tokenizer)
    messages = conversation_for(name, "tools")
    model_input, weights = renderer.build_supervised_example(messages)
    reply = [t for t, w in zip(model_input.to_ints(), weights, strict=True) if w]
    assert renderer.parse_response(reply) == (messages[-1], True)
