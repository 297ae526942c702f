"""Renderers built from spans: each message renders as a header and a body, and the generic code
here turns spans into tokens and weights. Each span is tokenized on its own, so the tokens of a
conversation are always a prefix of the tokens of that conversation continued. A span may hold
image chunks (vision-language renderers): they fill their positions in the model input and are
never trained (their positions are placeholders, not tokens the model writes)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from train_core.renderers.base import Renderer, as_train_on_what
from train_core.renderers.messages import Message
from train_core.renderers.tokenizer import Part, TokenCodec, Tokenizer
from train_core.renderers.train_on_what import TrainOnWhat, selected_messages
from train_core.types import EncodedTextChunk, ImageChunk, ModelInput, ModelInputChunk

SpanKind = Literal["preamble", "header", "body"]
SpanPart = Part | ImageChunk


@dataclass(frozen=True)
class Span:
    """Rendered parts owned by one message, or a preamble the renderer adds itself (BOS, a default
    system prompt) that is never trained. A header is trained only under ALL_TOKENS; a body is
    trained when its message is selected."""

    kind: SpanKind
    parts: tuple[SpanPart, ...]
    message_index: int = -1

    @classmethod
    def preamble(cls, *parts: SpanPart) -> Span:
        return cls("preamble", parts)

    @classmethod
    def header(cls, message_index: int, *parts: SpanPart) -> Span:
        return cls("header", parts, message_index)

    @classmethod
    def body(cls, message_index: int, *parts: SpanPart) -> Span:
        return cls("body", parts, message_index)


class SpanRenderer(Renderer):
    """A renderer defined by `render_spans` (the conversation) and `generation_header` (what opens
    the next message); prompts, supervised examples and weights follow from those two."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        super().__init__(tokenizer)
        self.codec = TokenCodec(tokenizer)

    @abstractmethod
    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        """The preamble and every message's header and body. `add_generation_prompt` says another message
        follows, which some formats render differently (e.g. no end-of-response token)."""

    @abstractmethod
    def generation_header(self, messages: Sequence[Message], role: str) -> list[Part]:
        """The header that opens the next `role` message after `messages`."""

    def build_generation_prompt(
        self, messages: Sequence[Message], role: str = "assistant", prefill: str | None = None
    ) -> ModelInput:
        chunks: list[ModelInputChunk] = []
        for span in self.render_spans(messages, add_generation_prompt=True):
            chunks += self._encode(span.parts)
        chunks += self._encode(self.generation_header(messages, role))
        chunks += self._encode([prefill or ""])
        return _joined(chunks)

    def build_supervised_example(
        self,
        messages: Sequence[Message],
        train_on_what: TrainOnWhat | str = TrainOnWhat.LAST_ASSISTANT_MESSAGE,
    ) -> tuple[ModelInput, list[float]]:
        mode = as_train_on_what(train_on_what)
        selected = selected_messages(messages, mode)
        chunks: list[ModelInputChunk] = []
        weights: list[float] = []
        for span in self.render_spans(messages, add_generation_prompt=False):
            weight = _span_weight(span, selected, mode)
            for chunk in self._encode(span.parts):
                chunks.append(chunk)
                weights += [weight if isinstance(chunk, EncodedTextChunk) else 0.0] * chunk.length
        return _joined(chunks), weights

    def _encode(self, parts: Sequence[SpanPart]) -> list[ModelInputChunk]:
        """Text and special tokens as token chunks (`TokenCodec.encode_parts` between images)."""
        chunks: list[ModelInputChunk] = []
        pending: list[Part] = []
        for part in [*parts, None]:
            if isinstance(part, ImageChunk) or part is None:
                if tokens := self.codec.encode_parts(pending):
                    chunks.append(EncodedTextChunk(tuple(tokens)))
                pending = []
                if part is not None:
                    chunks.append(part)
            else:
                pending.append(part)
        return chunks


def _joined(chunks: Sequence[ModelInputChunk]) -> ModelInput:
    """One model input, adjacent token chunks merged (so a text-only input is one chunk)."""
    merged: list[ModelInputChunk] = []
    for chunk in chunks:
        previous = merged[-1] if merged else None
        if isinstance(chunk, EncodedTextChunk) and isinstance(previous, EncodedTextChunk):
            merged[-1] = EncodedTextChunk(previous.tokens + chunk.tokens)
        else:
            merged.append(chunk)
    return ModelInput(tuple(merged))


def _span_weight(span: Span, selected: list[bool], mode: TrainOnWhat) -> float:
    if span.kind == "preamble":
        return 0.0
    if span.kind == "header":
        return 1.0 if mode == TrainOnWhat.ALL_TOKENS else 0.0
    return 1.0 if selected[span.message_index] else 0.0
