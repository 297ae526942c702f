"""The thinking-in-history cases against tinker-cookbook 0.6.1, the reference, run live.

Thinking-disabled renderers drop the reasoning of earlier assistant messages the way the models'
templates do; the reference does too. Each case is a generation prompt, or a supervised example
whose reply did not reason, for a conversation whose history reasoned: both renderers must write
the same text. (Token ids are compared too where the reference keeps its own rendering and
prompt consistent on the tiny tokenizer.) Needs `scripts/setup_cookbook.sh`; skipped without it.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from renderer_cases import decode_text
from transformers import PreTrainedTokenizerBase

from train_core.renderers import Message, get_renderer

cookbook = pytest.importorskip(
    "tinker_cookbook.renderers", reason="tinker-cookbook is not installed (bash scripts/setup_cookbook.sh)"
)

THINKING_DISABLED = ["qwen3_disable_thinking", "qwen3_instruct", "deepseekv3", "deepseekv3_disable_thinking"]


def history_conversations() -> list[list[Message]]:
    """Every shape of a chat whose earlier replies reasoned: with or without a system message,
    one or two earlier turns, ending with the reply (which did not reason)."""
    conversations = []
    for system, turns in itertools.product([False, True], [1, 2]):
        messages = [Message(role="system", content="Be brief.")] if system else []
        for t in range(turns):
            messages += [
                Message(role="user", content=f"question {t}?"),
                Message(role="assistant", content=f"answer {t}.", thinking=f"reason {t}."),
            ]
        messages += [Message(role="user", content="last?"), Message(role="assistant", content="last answer.")]
        conversations.append(messages)
    return conversations


CASES = [(name, k) for name in THINKING_DISABLED for k in range(len(history_conversations()))]


def to_cookbook(message: Message) -> dict[str, Any]:
    content: Any = message["content"]
    if message.get("thinking"):
        content = [{"type": "thinking", "thinking": message["thinking"]}, {"type": "text", "text": content}]
    out: dict[str, Any] = {"role": message["role"], "content": content}
    if calls := message.get("tool_calls"):
        body = cookbook.ToolCall.FunctionBody
        out["tool_calls"] = [
            cookbook.ToolCall(function=body(name=c["name"], arguments=json.dumps(c["arguments"]))) for c in calls
        ]
    return out


@pytest.mark.parametrize(("name", "index"), CASES)
def test_generation_prompt_after_a_history_that_reasoned_equals_the_reference(
    name: str, index: int, tokenizer: PreTrainedTokenizerBase
) -> None:
    history = history_conversations()[index][:-1]
    ours = get_renderer(name, tokenizer).build_generation_prompt(history).to_ints()
    theirs = cookbook.get_renderer(name, tokenizer).build_generation_prompt([to_cookbook(m) for m in history])
    assert ours == theirs.to_ints()
    assert "reason" not in decode_text(tokenizer, ours)


@pytest.mark.parametrize(("name", "index"), CASES)
def test_supervised_example_after_a_history_that_reasoned_equals_the_reference(
    name: str, index: int, tokenizer: PreTrainedTokenizerBase
) -> None:
    messages = history_conversations()[index]
    tokens, weights = get_renderer(name, tokenizer).build_supervised_example(messages)
    try:
        their_tokens, their_weights = cookbook.get_renderer(name, tokenizer).build_supervised_example(
            [to_cookbook(m) for m in messages]
        )
    except cookbook.RendererError as error:
        # The reference checks its example against its own prompt token by token; on the tiny
        # tokenizer Qwen3's `</think>\n\n` + reply merges differently in the two, so it refuses
        # any reply. The text is still compared against its prompt.
        assert name == "qwen3_disable_thinking" and "thinking turned off" in str(error)
        prompt = cookbook.get_renderer(name, tokenizer).build_generation_prompt([to_cookbook(m) for m in messages[:-1]])
        ours_text = decode_text(tokenizer, tokens.to_ints())
        assert ours_text == decode_text(tokenizer, prompt.to_ints()) + "last answer.<|im_end|>"
        return
    assert decode_text(tokenizer, tokens.to_ints()) == decode_text(tokenizer, their_tokens.to_ints())
    ours_trained = [t for t, w in zip(tokens.to_ints(), weights, strict=True) if w]
    theirs_trained = [t for t, w in zip(their_tokens.to_ints(), their_weights.tolist(), strict=True) if w]
    assert decode_text(tokenizer, ours_trained) == decode_text(tokenizer, theirs_trained)
