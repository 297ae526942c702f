"""tml_v0 token for token against the format's published implementation, `tml-renderers`' TMLv0
renderer (what tinker-cookbook 0.6.1's `tml_v0` delegates to), on its own o200k tokenizer:
generation prompts (with the effort message) and supervised examples with their weights, on
conversations with system messages, earlier reasoning, tool rounds and several calls.

Needs `pip install tml-renderers` (an Apache-2.0 wheel); skipped without it."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from train_core.renderers import Message, ToolCall, get_renderer

chat = pytest.importorskip("tml_renderers.chat", reason="tml-renderers is not installed (pip install tml-renderers)")
tml_tokenizers = pytest.importorskip("tml_renderers.tokenizers")
tml_v0 = pytest.importorskip("tml_renderers.v0")

EFFORT = 0.9


class O200kChat:
    """tml-renderers' tokenizer behind the `encode`/`decode` a renderer uses, its special tokens
    spelled `<|name|>` (how the kitchen renderer names them)."""

    def __init__(self) -> None:
        self.native = tml_tokenizers.O200kBaseChatTokenizer()

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        if text.startswith("<|") and text.endswith("|>") and "<|" not in text[2:]:
            return [self.native.encode_special(text[2:-2])]
        return list(self.native.encode_ordinary(text))

    def decode(self, token_ids: list[int]) -> str:
        return "".join(
            f"<|{name}|>" if (name := self.native.decode_special(t)) is not None else self.native.decode([t])
            for t in token_ids
        )


@pytest.fixture(scope="module")
def o200k() -> O200kChat:
    return O200kChat()


def conversations() -> list[list[Message]]:
    """16 conversations, each ending with the reply (which reasons or not)."""
    out = []
    for system, earlier, tools, reasons in itertools.product([False, True], repeat=4):
        messages = [Message(role="system", content="Be brief.")] if system else []
        if earlier:
            messages += [
                Message(role="user", content="first?"),
                Message(role="assistant", content="first answer.", thinking="first reason."),
            ]
        messages.append(Message(role="user", content="last?"))
        if tools:
            calls = [ToolCall(name="get_weather", arguments={"city": f"C{k}", "days": k}) for k in range(2)]
            messages.append(Message(role="assistant", content="", thinking="call both.", tool_calls=calls))
            messages += [Message(role="tool", content=f'{{"temp": {k}}}', name="get_weather") for k in range(2)]
        reply = Message(role="assistant", content="last answer.")
        if reasons:
            reply["thinking"] = "last reason."
        out.append([*messages, reply])
    return out


def to_native(messages: list[Message]) -> list[Any]:
    """The same conversation as tml-renderers' messages: one model message per part, each model
    turn closed by ModelEndSampling (as tinker-cookbook's adapter does)."""
    kinds = {"system": chat.AuthorKind.System, "user": chat.AuthorKind.User, "tool": chat.AuthorKind.Tool}
    model = chat.Author(chat.AuthorKind.Model)
    native = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            author = chat.Author(kinds[message["role"]], message.get("name"))
            native.append(chat.Message(content=chat.Text(message["content"]), author=author))
            continue
        if message.get("thinking"):
            native.append(chat.Message(content=chat.Thinking(message["thinking"]), author=model))
        if message["content"] or not message.get("tool_calls"):
            native.append(chat.Message(content=chat.Text(message["content"]), author=model))
        for call in message.get("tool_calls") or []:
            invoke = chat.OpenAIMessage.from_oss_messages(
                [
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
                            }
                        ],
                    }
                ]
            )[0].to_messages()
            native += [m for m in invoke if not isinstance(m.content, (chat.Text, chat.ModelEndSampling))]
        if i == len(messages) - 1 or messages[i + 1]["role"] != "assistant":
            native.append(chat.Message(content=chat.ModelEndSampling(), author=model))
    return native


def with_effort(native: list[Any]) -> list[Any]:
    effort = chat.Message(content=chat.ThinkingEffort(round(EFFORT * 1000)), author=chat.Author(chat.AuthorKind.System))
    first = next(i for i, m in enumerate(native) if m.author.kind != chat.AuthorKind.System)
    return [*native[:first], effort, *native[first:]]


def span_tokens(spans: list[Any]) -> list[int]:
    return [t for s in spans for t in (s.span if hasattr(s, "span") else s).tokens]


@pytest.mark.parametrize("index", range(16))
def test_prompt_and_example_equal_tml_renderers(index: int, o200k: O200kChat) -> None:
    messages = conversations()[index]
    ours = get_renderer("tml_v0", o200k)
    reference = tml_v0.Renderer(o200k.native)

    history = messages[:-1]
    spans, _ = reference.render_for_completion_with_effort(to_native(history), EFFORT)
    assert ours.build_generation_prompt(history).to_ints() == span_tokens(spans)

    (example,) = reference.render_for_sft(with_effort(to_native(messages)))
    tokens, weights = ours.build_supervised_example(messages, "all_assistant_messages")
    assert tokens.to_ints() == span_tokens(example.input_token_spans)
    assert weights == example.per_token_loss_weight_unshifted


def test_the_reply_parses_back(o200k: O200kChat) -> None:
    renderer = get_renderer("tml_v0", o200k)
    for messages in conversations():
        tokens, weights = renderer.build_supervised_example(messages)
        reply = [t for t, w in zip(tokens.to_ints(), weights, strict=True) if w]
        assert renderer.parse_response(reply) == (messages[-1], True)
