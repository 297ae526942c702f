"""Kimi K2 (Thinking) chat format:

    <|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>
    <|im_user|>user<|im_middle|>{content}<|im_end|>
    <|im_assistant|>assistant<|im_middle|><think>{thinking}</think>{content}<|im_end|>

The default system message is added when the conversation does not start with one (K2's
template adds it). Messages up to the last assistant message without tool calls are history and
keep an empty `<think></think>`;
later ones (the current tool-using turn, and the reply being trained) keep their thinking. Tool
calls follow the content in a `<|tool_calls_section_begin|>` section, each identified as
`functions.{name}:{index}`; a tool result is a `<|im_system|>` message headed
`## Return of {tool_call_id}`.

Kimi K2.5 and K2.6 (`kimi_k25`, `kimi_k26`: one format) keep this but add no default system
message (their templates write none), and open the reply in the generation prompt: `<think>`
with thinking on, the empty `<think></think>` with it off (`*_disable_thinking`). That opening is
in the header of every assistant message, untrained, since sampling is always given it. With
thinking off every message's reasoning is dropped, as the template empties every block; reasoning
on the reply being trained is an error rather than silently dropped. `kimi_k26_preserve_thinking`
(the K2.6 template's `preserve_thinking`) keeps every message's reasoning.

One deliberate difference from the templates (checked against them byte for byte in
`tests/train_core/renderers/test_renderers_official_templates.py`): they count every message up
to the last assistant message without tool calls as history, which in a supervised example is
the reply itself, so the reply and its turn's tool steps would lose their reasoning; here the
reply is left out of that search, as in generation, so it is trained on what the model writes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from train_core.renderers.messages import Message, ToolCall, reject_trained_thinking
from train_core.renderers.responses import assistant_message, split_at_stop, unparsed
from train_core.renderers.span_renderer import Span, SpanRenderer
from train_core.renderers.tokenizer import Part, Special, Tokenizer
from train_core.renderers.tool_calls import decode_arguments, encode_arguments, match_calls
from train_core.types import StopCondition

IM_SYSTEM = Special("<|im_system|>")
IM_USER = Special("<|im_user|>")
IM_ASSISTANT = Special("<|im_assistant|>")
IM_MIDDLE = Special("<|im_middle|>")
IM_END = Special("<|im_end|>")
THINK = Special("<think>")
END_THINK = Special("</think>")
SECTION_BEGIN = Special("<|tool_calls_section_begin|>")
SECTION_END = Special("<|tool_calls_section_end|>")
CALL_BEGIN = Special("<|tool_call_begin|>")
ARGUMENT_BEGIN = Special("<|tool_call_argument_begin|>")
CALL_END = Special("<|tool_call_end|>")
DEFAULT_SYSTEM_PROMPT = "You are Kimi, an AI assistant created by Moonshot AI."
_CALL_RE = re.compile(
    re.escape(CALL_BEGIN.text) + r"(.*?)" + re.escape(ARGUMENT_BEGIN.text) + r"(.*?)" + re.escape(CALL_END.text),
    re.DOTALL,
)
_CALL_ID_RE = re.compile(r"(?:functions\.)?(.+):\d+")


ReplyOpening = Literal["none", "think", "no_think"]
"""What the generation prompt writes after the assistant header: nothing (K2), `<think>` (K2.5 /
K2.6 thinking) or `<think></think>` (thinking off)."""


class KimiK2Renderer(SpanRenderer):
    think_delimiters = (THINK.text, END_THINK.text)

    def __init__(
        self,
        tokenizer: Tokenizer,
        name: str = "kimi_k2",
        opening: ReplyOpening = "none",
        preserve_thinking: bool = False,
    ) -> None:
        super().__init__(tokenizer)
        self.name = name
        self.opening = opening
        self.preserve_thinking = preserve_thinking
        self.default_system = opening == "none"  # K2's template adds it; K2.5's and K2.6's do not

    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        spans: list[Span] = []
        if self.default_system and (not messages or messages[0]["role"] != "system"):
            spans.append(Span.preamble(*_header("system", None), DEFAULT_SYSTEM_PROMPT, IM_END))
        # The reply being trained is never history, so it is left out of the search.
        searched = messages if add_generation_prompt else messages[:-1]
        history_end = max(
            (i for i, m in enumerate(searched) if m["role"] == "assistant" and not m.get("tool_calls")),
            default=-1,
        )
        for i, message in enumerate(messages):
            header = _header(message["role"], message.get("name"))
            if message["role"] == "tool":
                header.append(f"## Return of {message.get('tool_call_id', '')}\n")
            body: list[Part] = []
            if message["role"] == "assistant":
                keep_thinking = i > history_end or self.preserve_thinking
                if self.opening == "no_think":  # the template empties every block with thinking off
                    if keep_thinking and i == len(messages) - 1 and not add_generation_prompt:
                        reject_trained_thinking(self.name, self.name.replace("_disable_thinking", ""), i, message)
                    keep_thinking = False
                body += _assistant_body(message, keep_thinking)
                opening = self._opening_parts()
                if body[: len(opening)] == opening:
                    header, body = header + opening, body[len(opening) :]
            else:
                body.append(message["content"])
            spans += [Span.header(i, *header), Span.body(i, *body, IM_END)]
        return spans

    def _opening_parts(self) -> list[Part]:
        openings: dict[ReplyOpening, list[Part]] = {"none": [], "think": [THINK], "no_think": [THINK, "", END_THINK]}
        return openings[self.opening]

    def generation_header(self, messages: Sequence[Message], role: str) -> list[Part]:
        return _header(role, None) + (self._opening_parts() if role == "assistant" else [])

    def get_stop_sequences(self) -> StopCondition:
        return [self.codec.special_id(IM_END.text)]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        body, found = split_at_stop(tokens, {self.codec.special_id(IM_END.text)})
        text = self.codec.decode(body)
        if not found:
            return unparsed(text)
        thinking, rest = None, text
        if self.opening == "think" and END_THINK.text in text:
            thinking, _, rest = text.partition(END_THINK.text)
        elif self.opening == "none" and text.startswith(THINK.text) and END_THINK.text in text:
            thinking, _, rest = text.removeprefix(THINK.text).partition(END_THINK.text)
        content, _, section = rest.partition(SECTION_BEGIN.text)
        if not section:
            return assistant_message(content, thinking), True
        calls = _parse_section(section)
        if calls is None:
            return unparsed(text)
        return assistant_message(content, thinking, calls), True


def _header(role: str, name: str | None) -> list[Part]:
    token = {"user": IM_USER, "assistant": IM_ASSISTANT}.get(role, IM_SYSTEM)
    return [token, name or role, IM_MIDDLE]


def _assistant_body(message: Message, keep_thinking: bool) -> list[Part]:
    thinking = message.get("thinking", "") if keep_thinking else ""
    body: list[Part] = [THINK, thinking, END_THINK, message["content"]]
    calls = message.get("tool_calls") or []
    if calls:
        body.append(SECTION_BEGIN)
        for j, call in enumerate(calls):
            call_id = call.get("id") or f"functions.{call['name']}:{j}"
            body += [CALL_BEGIN, call_id, ARGUMENT_BEGIN, encode_arguments(call["arguments"]), CALL_END]
        body.append(SECTION_END)
    return body


def _parse_section(section: str) -> list[ToolCall] | None:
    """The calls in a tool-calls section; None if it is malformed."""
    inner, closed, _ = section.partition(SECTION_END.text)
    calls: list[ToolCall] = []
    for raw_id, arguments_text in (match_calls(_CALL_RE, inner) if closed else None) or []:
        arguments = decode_arguments(arguments_text.strip())
        name = _CALL_ID_RE.fullmatch(raw_id.strip())
        if arguments is None or name is None:
            return None
        calls.append(ToolCall(name=name.group(1), arguments=arguments, id=raw_id.strip()))
    return calls or None
