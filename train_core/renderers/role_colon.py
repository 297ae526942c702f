"""RoleColon: a plain-text format for base models with no chat special tokens.

    User: {content}\n\nAssistant: {content}\n\nUser:

The `User:` after a final assistant message is trained with it, so the model learns to end its
turn with the stop string `\n\nUser:`. The tokenizer's BOS token, when it has one (base-model
tokenizers such as Llama 3's do), opens the conversation, untrained: base models were pretrained
with it. `parse_response` keeps the model's own whitespace, so rendering then parsing an
assistant message gives its content back exactly."""

from __future__ import annotations

from collections.abc import Sequence

from train_core.renderers.messages import Message, reject_unsupported
from train_core.renderers.span_renderer import Span, SpanRenderer
from train_core.renderers.tokenizer import Part, Special
from train_core.types import StopCondition

STOP_STRING = "\n\nUser:"


class RoleColonRenderer(SpanRenderer):
    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        bos = getattr(self.codec.tokenizer, "bos_token", None)
        spans: list[Span] = [Span.preamble(Special(bos))] if isinstance(bos, str) and bos else []
        for i, message in enumerate(messages):
            reject_unsupported("role_colon", i, message, ("thinking", "tool_calls"))
            spans.append(Span.header(i, _role_header(message["role"])))
            body: list[Part] = [f" {message['content']}\n\n"]
            if i == len(messages) - 1 and message["role"] == "assistant" and not add_generation_prompt:
                body.append("User:")
            spans.append(Span.body(i, *body))
        return spans

    def generation_header(self, messages: Sequence[Message], role: str) -> list[Part]:
        return [_role_header(role)]

    def get_stop_sequences(self) -> StopCondition:
        return [STOP_STRING]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        text = self.codec.decode(tokens)
        content, found, _ = text.partition(STOP_STRING)
        # The space after `Assistant:` is the format's, everything else the model's.
        return Message(role="assistant", content=content.removeprefix(" ")), bool(found)


def _role_header(role: str) -> str:
    return f"{role.capitalize()}:"
