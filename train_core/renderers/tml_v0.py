"""TMLv0, the chat format of Thinking Machines' Inkling models (tinker-cookbook's `tml_v0`).

Every message is framed on its own, and a reply is a run of model messages, one per part::

    <|message_system|><|content_text|>Thinking effort level: 0.9<|end_message|>
    <|message_user|><|content_text|>{content}<|end_message|>
    <|message_model|><|content_thinking|>{thinking}<|end_message|>
    <|message_model|><|content_text|>{content}<|end_message|>
    <|message_model|>{name}<|content_invoke_tool_json|>{"name":...,"args":{...}}<|end_message|>
    <|content_model_end_sampling|>
    <|message_tool|>{name}<|content_text|>{result}<|end_message|>

(line breaks added here; the format has none). `<|content_model_end_sampling|>` closes the model's
turn and is its stop token. The generation prompt ends with the last message: the model opens its
reply itself with `<|message_model|>`, so that token is trained, as the whole reply is. Nothing is
stripped or re-headed by position (earlier reasoning stays in history), so a conversation's tokens
are a prefix of its continuation's. A system message stating the thinking effort (0.9 by default,
as tinker-cookbook's) goes before the first message that is not a system message, in prompts and
supervised examples alike; it is never trained.

Source: Inkling's chat template is not published as a Jinja template. The format here is the one
tinker-cookbook 0.6.1 delegates to, the `tml-renderers` package's `v0.Renderer` (its public 0.2.1
wheel on PyPI; the cookbook pins >= 0.4.1, which is not published), checked token for token
against it where it is installed (tests/train_core/renderers/test_renderers_tml_v0.py). Special
tokens are looked up as `<|name|>` with tml-renderers' names; tool declarations are not rendered
(the format's declaration message is not documented), so the renderer has no native tool format
for tool-use envs, though it writes and parses tool calls in conversations."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence

from train_core.renderers.errors import RendererError
from train_core.renderers.messages import Message, ToolCall
from train_core.renderers.responses import assistant_message, split_at_stop, unparsed
from train_core.renderers.span_renderer import Span, SpanRenderer
from train_core.renderers.tokenizer import Part, Special, Tokenizer
from train_core.types import StopCondition

MESSAGE = {role: Special(f"<|message_{role}|>") for role in ("system", "user", "tool")}
MESSAGE_MODEL = Special("<|message_model|>")
TEXT = Special("<|content_text|>")
THINKING = Special("<|content_thinking|>")
INVOKE_TOOL = Special("<|content_invoke_tool_json|>")
END_MESSAGE = Special("<|end_message|>")
END_SAMPLING = Special("<|content_model_end_sampling|>")

DEFAULT_EFFORT = 0.9
_CALL_RE = re.compile(r"^(?P<name>[^<]*)<\|content_invoke_tool_json\|>(?P<payload>.*)$", re.DOTALL)


class TmlV0Renderer(SpanRenderer):
    def __init__(self, tokenizer: Tokenizer, effort: float = DEFAULT_EFFORT) -> None:
        if not math.isfinite(effort) or not 0.0 <= effort < 1.0:
            raise RendererError(f"tml_v0 thinking effort must be a finite number in [0, 1), got {effort}")
        super().__init__(tokenizer)
        self.effort = effort

    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        spans: list[Span] = []
        leading_systems = next((i for i, m in enumerate(messages) if m["role"] != "system"), len(messages))
        for i, message in enumerate(messages):
            if i == leading_systems:
                spans.append(Span.preamble(MESSAGE["system"], TEXT, _effort_text(self.effort), END_MESSAGE))
            role = message["role"]
            if role == "assistant":
                ends_turn = i == len(messages) - 1 or messages[i + 1]["role"] != "assistant"
                spans.append(Span.body(i, *_model_parts(message), *([END_SAMPLING] if ends_turn else [])))
            else:
                name = message.get("name", "") if role == "tool" else ""
                spans.append(Span.header(i, MESSAGE[role], name, TEXT))
                spans.append(Span.body(i, message["content"], END_MESSAGE))
        if leading_systems == len(messages):
            spans.append(Span.preamble(MESSAGE["system"], TEXT, _effort_text(self.effort), END_MESSAGE))
        return spans

    def generation_header(self, messages: Sequence[Message], role: str) -> list[Part]:
        """Nothing for the model, which opens its own reply; another role's message opener."""
        return [] if role == "assistant" else [MESSAGE[role], TEXT]

    def get_stop_sequences(self) -> StopCondition:
        return [self.codec.special_id(END_SAMPLING.text)]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        body, found = split_at_stop(tokens, {self.codec.special_id(END_SAMPLING.text)})
        text = self.codec.decode(body)
        if not found or not text.startswith(MESSAGE_MODEL.text) or not text.endswith(END_MESSAGE.text):
            return unparsed(text)
        content, thinking, calls = "", "", []
        for part in text.removesuffix(END_MESSAGE.text).split(END_MESSAGE.text + MESSAGE_MODEL.text):
            part = part.removeprefix(MESSAGE_MODEL.text)
            if part.startswith(TEXT.text):
                content += part.removeprefix(TEXT.text)
            elif part.startswith(THINKING.text):
                thinking += part.removeprefix(THINKING.text)
            elif (call := _decode_call(part)) is not None:
                calls.append(call)
            else:
                return unparsed(text)
        return assistant_message(content, thinking, calls), True


def _effort_text(effort: float) -> str:
    """As tml-renderers writes it: thousandths, without trailing zeros (0.9, 0.25, 0)."""
    return f"Thinking effort level: {round(effort * 1000) / 1000:.3f}".rstrip("0").rstrip(".")


def _model_parts(message: Message) -> list[Part]:
    """One model message per part: reasoning, text (unless the message only calls tools), calls."""
    parts: list[Part] = []
    if thinking := message.get("thinking"):
        parts += [MESSAGE_MODEL, THINKING, thinking, END_MESSAGE]
    calls = message.get("tool_calls") or []
    if message["content"] or not calls:
        parts += [MESSAGE_MODEL, TEXT, message["content"], END_MESSAGE]
    for call in calls:
        payload = json.dumps(
            {"name": call["name"], "args": call["arguments"]}, ensure_ascii=False, separators=(",", ":")
        )
        parts += [MESSAGE_MODEL, call["name"], INVOKE_TOOL, payload, END_MESSAGE]
    return parts


def _decode_call(part: str) -> ToolCall | None:
    match = _CALL_RE.match(part)
    if match is None:
        return None
    try:
        payload = json.loads(match["payload"])
    except json.JSONDecodeError:
        return None
    if (
        not isinstance(payload, dict)
        or payload.get("name") != match["name"]
        or not isinstance(payload.get("args"), dict)
    ):
        return None
    return ToolCall(name=match["name"], arguments=payload["args"])
