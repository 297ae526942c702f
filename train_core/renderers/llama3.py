"""Llama 3 chat format (Llama 3.1 tool calls), without the "Cutting Knowledge Date" preamble:

    <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>
    <|start_header_id|>assistant<|end_header_id|>\n\n{content}<|eot_id|>

Message text is trimmed, as the Llama 3 templates trim it. A tool call is the whole assistant
body, `{"name": ..., "parameters": {...}}`; a tool result is an `ipython` message, its text as
given (the Llama 3.1 template JSON-quotes a string result: Jinja's `iterable` test is true for
strings; Meta's prompt format writes the output as is, as here and in tinker-cookbook). Checked
against the Llama 3.1 template in `tests/train_core/renderers/test_renderers_official_templates.py`,
whose named differences are the preamble and the tool result's quoting."""

from __future__ import annotations

from collections.abc import Sequence

from train_core.renderers.errors import RendererError
from train_core.renderers.messages import Message, reject_unsupported
from train_core.renderers.responses import assistant_message, split_at_stop, unparsed
from train_core.renderers.span_renderer import Span, SpanRenderer
from train_core.renderers.tokenizer import Part, Special
from train_core.renderers.tool_calls import decode_named_call, encode_named_call
from train_core.types import StopCondition

BEGIN_OF_TEXT = Special("<|begin_of_text|>")
START_HEADER = Special("<|start_header_id|>")
END_HEADER = Special("<|end_header_id|>")
EOT = Special("<|eot_id|>")
ARGUMENTS_KEY = "parameters"
TOOL_CALL_PREFIX = '{"name"'


class Llama3Renderer(SpanRenderer):
    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        spans = [Span.preamble(BEGIN_OF_TEXT)]
        for i, message in enumerate(messages):
            reject_unsupported("llama3", i, message, ("thinking",))
            spans.append(Span.header(i, *_header(message["role"])))
            spans.append(Span.body(i, _body_text(i, message), EOT))
        return spans

    def generation_header(self, messages: Sequence[Message], role: str) -> list[Part]:
        return _header(role)

    def get_stop_sequences(self) -> StopCondition:
        return [self.codec.special_id(EOT.text)]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        body, found = split_at_stop(tokens, {self.codec.special_id(EOT.text)})
        text = self.codec.decode(body)
        if not found:
            return unparsed(text)
        if not text.lstrip().startswith(TOOL_CALL_PREFIX):
            return assistant_message(text), True
        call = decode_named_call(text, ARGUMENTS_KEY)
        return (assistant_message("", tool_calls=[call]), True) if call else unparsed(text)


def _header(role: str) -> list[Part]:
    return [START_HEADER, "ipython" if role == "tool" else role, END_HEADER, "\n\n"]


def _body_text(index: int, message: Message) -> str:
    """A message's text trimmed, as the Llama 3 templates trim it; a tool result as given."""
    calls = message.get("tool_calls") or []
    if not calls:
        return message["content"] if message["role"] == "tool" else message["content"].strip()
    if len(calls) > 1 or message["content"]:
        raise RendererError(
            f"llama3 renders one tool call per assistant message and no text beside it; message "
            f"{index} has {len(calls)} tool calls and {len(message['content'])} characters of content"
        )
    return encode_named_call(calls[0], ARGUMENTS_KEY)
