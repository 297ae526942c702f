"""Renderers against tinker-cookbook 0.6.1, the reference, run live.

The thinking-in-history cases (issue 28's 39): thinking-disabled renderers drop the reasoning of
earlier assistant messages the way the models' templates do; the reference does too. Each case is
a generation prompt, or a supervised example whose reply did not reason, for a conversation whose
earlier replies reasoned (4 shapes) or whose tool-calling step reasoned (1 shape), for each of the
4 thinking-disabled renderers kitchen and the reference share: 40 cases. Before kitchen dropped
history thinking it refused all 40, and the reference renders 39 of them on the model's tokenizer;
the 40th, qwen3_disable_thinking's example after a reasoning tool step, it refuses too ("this turn
contains reasoning"). On the tiny tokenizer it also refuses qwen3_disable_thinking's other 4
examples, for a token merge; those are compared as text. Both renderers must write the same tokens,
except where kitchen follows the model's template instead (`follows_the_template`).

The newer families: on conversations with and without a system message, earlier turns that
reasoned, tool rounds of one and two calls and a reply that reasons or not, every renderer writes
the reference's text (prompt, supervised example, trained part), except where it follows the
model's template instead (`DIFFERS_ON_PURPOSE`, each documented in its renderer's docstring).

Needs `scripts/setup_cookbook.sh`; skipped without it."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from official_templates import CHECKS, Rendering
from renderer_cases import decode_text
from test_renderers_newer_goldens import NEWER_GOLDENS
from transformers import PreTrainedTokenizerBase

from train_core.renderers import Message, ToolCall, get_renderer

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
    call = ToolCall(name="get_weather", arguments={"city": "C"}, id="call_0")
    conversations.append(
        [
            Message(role="user", content="last?"),
            Message(role="assistant", content="Checking.", thinking="call it.", tool_calls=[call]),
            Message(role="tool", content='{"temp": 1}', name="get_weather", tool_call_id="call_0"),
            Message(role="assistant", content="last answer."),
        ]
    )
    return conversations


CASES = [(name, k) for name in THINKING_DISABLED for k in range(len(history_conversations()))]


def follows_the_template(name: str, messages: list[Message]) -> bool:
    """qwen3_disable_thinking writes a current-turn tool step's reasoning, as Qwen3's template
    does with thinking off; the reference strips it (documented in the renderer's docstring)."""
    return name == "qwen3_disable_thinking" and any(m.get("tool_calls") and m.get("thinking") for m in messages)


def to_cookbook(message: Message) -> dict[str, Any]:
    content: Any = message["content"]
    if message.get("thinking"):
        content = [{"type": "thinking", "thinking": message["thinking"]}, {"type": "text", "text": content}]
    out: dict[str, Any] = {"role": message["role"], "content": content}
    if calls := message.get("tool_calls"):
        body = cookbook.ToolCall.FunctionBody
        out["tool_calls"] = [
            cookbook.ToolCall(function=body(name=c["name"], arguments=json.dumps(c["arguments"])), id=c.get("id"))
            for c in calls
        ]
    for key in ("name", "tool_call_id"):
        if key in message:
            out[key] = message[key]
    return out


@pytest.mark.parametrize(("name", "index"), CASES)
def test_generation_prompt_after_a_history_that_reasoned_equals_the_reference(
    name: str, index: int, tokenizer: PreTrainedTokenizerBase
) -> None:
    history = history_conversations()[index][:-1]
    ours = get_renderer(name, tokenizer).build_generation_prompt(history).to_ints()
    if follows_the_template(name, history):
        assert decode_text(tokenizer, ours) == CHECKS[name].render(Rendering(history, add_generation_prompt=True))
        assert "call it." in decode_text(tokenizer, ours)
        return
    theirs = cookbook.get_renderer(name, tokenizer).build_generation_prompt([to_cookbook(m) for m in history])
    if any(m.get("tool_calls") for m in history):
        # The tiny tokenizer has Qwen3's `<tool_call>` in its vocabulary but not as an added
        # token, so the reference's plain encode splits it where kitchen writes the one token.
        assert decode_text(tokenizer, ours) == decode_text(tokenizer, theirs.to_ints())
    else:
        assert ours == theirs.to_ints()
    assert "reason" not in decode_text(tokenizer, ours)


@pytest.mark.parametrize(("name", "index"), CASES)
def test_supervised_example_after_a_history_that_reasoned_equals_the_reference(
    name: str, index: int, tokenizer: PreTrainedTokenizerBase
) -> None:
    messages = history_conversations()[index]
    tokens, weights = get_renderer(name, tokenizer).build_supervised_example(messages)
    if follows_the_template(name, messages):
        # The reference refuses this example ("this turn contains reasoning": the tool step is in
        # the trained turn); kitchen writes what Qwen3's template writes.
        ours_text = decode_text(tokenizer, tokens.to_ints())
        assert ours_text + "\n" == CHECKS[name].render(Rendering(messages, add_generation_prompt=False))
        return
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


def corpus(name: str) -> list[list[Message]]:
    """16 conversations; a thinking-disabled renderer's reply does not reason."""
    conversations = []
    for system, turn, tools, reply_thinks in itertools.product([False, True], repeat=4):
        messages = [Message(role="system", content="Be brief.")] if system else []
        if turn:
            messages += [
                Message(role="user", content="first?"),
                Message(role="assistant", content="first answer.", thinking="first reason."),
            ]
        messages.append(Message(role="user", content="last?"))
        if tools:
            calls = [
                ToolCall(name="get_weather", arguments={"city": f"C{k}", "days": k}, id=f"call_{k}") for k in range(2)
            ]
            messages.append(Message(role="assistant", content="Checking.", thinking="call both.", tool_calls=calls))
            messages += [
                Message(role="tool", content=f'{{"temp": {k}}}', name="get_weather", tool_call_id=f"call_{k}")
                for k in (1, 0)
            ]
        reply = Message(role="assistant", content="last answer.")
        if reply_thinks and "disable_thinking" not in name:
            reply["thinking"] = "last reason."
        conversations.append([*messages, reply])
    return conversations


def differs_on_purpose(name: str, messages: list[Message]) -> bool:
    """Where the renderer follows the model's template and the reference does not."""
    tool_step_reasons = any(m.get("tool_calls") and m.get("thinking") for m in messages)
    if name in ("qwen3_5", "qwen3_5_disable_thinking"):
        return tool_step_reasons  # the template keeps a current-turn tool step's reasoning
    if name == "qwen3_5_preserve_thinking":  # the template gives every message a block, even empty
        return any(m["role"] == "assistant" and not m.get("thinking") for m in messages[:-1])
    if name.startswith(("kimi_k25", "kimi_k26")) and messages[0]["role"] != "system":
        return True  # the K2.5 / K2.6 templates add no default system message; the reference adds K2's
    if name in ("kimi_k25_disable_thinking", "kimi_k26_disable_thinking"):
        return tool_step_reasons  # with thinking off the template empties the tool step's block too
    return False


NEWER = sorted(NEWER_GOLDENS)


@pytest.mark.parametrize("name", NEWER)
def test_newer_renderers_write_the_reference_text(name: str, tokenizer: PreTrainedTokenizerBase) -> None:
    ours, theirs = get_renderer(name, tokenizer), cookbook.get_renderer(name, tokenizer)
    compared = 0
    for messages in corpus(name):
        history = messages[:-1]
        if not differs_on_purpose(name, history):
            our_prompt = ours.build_generation_prompt(history).to_ints()
            their_prompt = theirs.build_generation_prompt([to_cookbook(m) for m in history]).to_ints()
            assert decode_text(tokenizer, our_prompt) == decode_text(tokenizer, their_prompt)
        if differs_on_purpose(name, messages):
            continue
        tokens, weights = ours.build_supervised_example(messages)
        their_tokens, their_weights = theirs.build_supervised_example([to_cookbook(m) for m in messages])
        assert decode_text(tokenizer, tokens.to_ints()) == decode_text(tokenizer, their_tokens.to_ints())
        ours_trained = [t for t, w in zip(tokens.to_ints(), weights, strict=True) if w]
        theirs_trained = [t for t, w in zip(their_tokens.to_ints(), their_weights.tolist(), strict=True) if w]
        assert decode_text(tokenizer, ours_trained) == decode_text(tokenizer, theirs_trained)
        compared += 1
    assert compared >= 4
