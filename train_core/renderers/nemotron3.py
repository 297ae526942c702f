"""NVIDIA Nemotron-3 chat format (Nano / Super, and the Ultra / 3.5 variant), as its templates
write it:

    <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{content}<|im_end|>
    \n<|im_start|>assistant\n<think>\n{thinking}\n</think>\n{content}<|im_end|>

ChatML like Qwen3.5 (`qwen3_5.py`), with these differences: a system block is always written (empty
when the conversation has none), and a later system message is written where it is; system, user
and tool text is written as given, only an assistant message's text is trimmed (at its end, as the
template trims block and text together; a history message with tool calls at both ends in Nano, not
at all in Ultra); every assistant message opens with a think block, the empty `<think></think>`
when it did not reason (reasoning that is only whitespace counts as none) or its reasoning is
dropped, reasoning written as given; reasoning is dropped from messages before the last user
message (the template's `truncate_history_thinking`, off in the `*_preserve_thinking` renderers);
one newline follows `</think>` (Nano / Super) or none (Ultra, whose block is
`<think>\n{thinking}</think>`); tool calls follow the text after one newline, each
`<tool_call>\n<function=...>...</tool_call>` followed by a newline, a non-string argument written
as the template's `|string` does for scalars (Python's spelling) and JSON for objects and lists;
consecutive tool results share one `user` message of `<tool_response>\n...\n</tool_response>\n`
blocks. Thinking on generates after `<think>\n`, thinking off after `<think></think>`;
`nemotron3_low_thinking` (Super) appends `\n\n{reasoning effort: low}` to the last user message,
`nemotron3_ultra_medium_thinking` `\n\n{reasoning effort: efficient}`. Checked against the Nano and
3.5 templates byte for byte in `tests/train_core/renderers/test_renderers_official_templates.py`.

The templates disagree with themselves on a reply that did not reason: the prompt opens
`<think>\n`, the rendering writes `<think></think>`; such an example is rendered as the template
writes it, so its prompt is not a prefix of it (tinker-cookbook keeps the same rendering). A
thinking-disabled renderer drops history reasoning as the template does; reasoning on the reply
being trained, which the template would write after a prompt that closed the block, is an
error. The opening the prompt supplies (`<think>\n`, or `<think></think>`) is in the header of the
assistant messages that start with it, untrained."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from train_core.renderers.errors import RendererError
from train_core.renderers.messages import Message, reject_trained_thinking
from train_core.renderers.qwen3_5 import function_block, parse_function_calls
from train_core.renderers.responses import assistant_message, split_at_stop, unparsed
from train_core.renderers.span_renderer import Span, SpanRenderer
from train_core.renderers.tokenizer import Part, Special, Tokenizer
from train_core.types import StopCondition

IM_START = Special("<|im_start|>")
IM_END = Special("<|im_end|>")
THINK = Special("<think>")
END_THINK = Special("</think>")
TOOL_CALL = Special("<tool_call>")
END_TOOL_CALL = Special("</tool_call>")
TOOL_RESPONSE = Special("<tool_response>")
END_TOOL_RESPONSE = Special("</tool_response>")
EMPTY_BLOCK: tuple[Part, ...] = (THINK, END_THINK)
Variant = Literal["nano", "ultra"]
EFFORT_SUFFIXES = {"low": "\n\n{reasoning effort: low}", "medium": "\n\n{reasoning effort: efficient}"}


class Nemotron3Renderer(SpanRenderer):
    think_delimiters = (THINK.text, END_THINK.text)

    def __init__(
        self,
        tokenizer: Tokenizer,
        name: str = "nemotron3",
        variant: Variant = "nano",
        thinking: bool = True,
        preserve_thinking: bool = False,
        effort: Literal["low", "medium"] | None = None,
    ) -> None:
        super().__init__(tokenizer)
        self.name = name
        self.variant = variant
        self.thinking = thinking
        self.preserve_thinking = preserve_thinking
        self.effort_suffix = EFFORT_SUFFIXES[effort] if effort else ""

    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        spans: list[Span] = []
        if not messages or messages[0]["role"] != "system":
            spans.append(Span.preamble(IM_START, "system\n", IM_END))
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        for i, message in enumerate(messages):
            opener: list[Part] = ["\n"] if spans else []
            role, content = message["role"], message["content"]
            if role in ("system", "user"):
                suffix = self.effort_suffix if i == last_user else ""
                spans += [Span.header(i, *opener, IM_START, f"{role}\n"), Span.body(i, content + suffix, IM_END)]
            elif role == "tool":
                follows_tool = i > 0 and messages[i - 1]["role"] == "tool"
                precedes_tool = i + 1 < len(messages) and messages[i + 1]["role"] == "tool"
                header: list[Part] = [] if follows_tool else [*opener, IM_START, "user\n"]
                body: list[Part] = [TOOL_RESPONSE, f"\n{content}\n", END_TOOL_RESPONSE, "\n"]
                spans += [Span.header(i, *header), Span.body(i, *body, *([] if precedes_tool else [IM_END]))]
            elif role == "assistant":
                replying = i == len(messages) - 1 and not add_generation_prompt
                historical = i < last_user and not self.preserve_thinking
                spans += self._assistant_spans(i, message, opener, historical, replying)
            else:
                raise RendererError(f"{self.name} has no role {role!r} (message {i})")
        return spans

    def _assistant_spans(
        self, i: int, message: Message, opener: list[Part], historical: bool, replying: bool
    ) -> list[Span]:
        """The template's text: the reasoning block (kept, or emptied in history), then the content,
        the whole right-trimmed; a message with tool calls then writes each call on its own line."""
        header: list[Part] = [*opener, IM_START, "assistant\n"]
        content, reasoning = message["content"], message.get("thinking", "")
        calls = message.get("tool_calls") or []
        if reasoning.strip() and not self.thinking and replying:
            reject_trained_thinking(self.name, self.name.replace("_disable_thinking", ""), i, message)
        body: list[Part]
        if reasoning.strip() and not historical:
            header += [THINK, "\n"]
            after = f"\n{content}" if self.variant == "nano" else content
            body = [f"{reasoning}\n" if self.variant == "nano" else reasoning, END_THINK, after.rstrip()]
        else:
            header += EMPTY_BLOCK
            if historical and calls:  # the template's split after the block, trimmed (Nano) or not (Ultra)
                text = content.strip() if self.variant == "nano" else content
            elif historical and reasoning.strip() and self.variant == "nano":
                text = f"\n{content}".rstrip()  # the split after a dropped block keeps its newline
            else:
                text = content.rstrip()
            body = [text]
        if calls:
            body.append("\n")
            for call in calls:
                body += [TOOL_CALL, f"\n{function_block(call, _scalar_text)}\n", END_TOOL_CALL, "\n"]
        return [Span.header(i, *header), Span.body(i, *body, IM_END)]

    def generation_header(self, messages: Sequence[Message], role: str) -> list[Part]:
        header: list[Part] = ["\n", IM_START, f"{role}\n"]
        if role == "assistant":
            header += [THINK, "\n"] if self.thinking else list(EMPTY_BLOCK)
        return header

    def get_stop_sequences(self) -> StopCondition:
        return [self.codec.special_id(IM_END.text)]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        """The reply after the prompt's opening; a reply that did not reason may also write the
        empty block the rendering gives it."""
        body, found = split_at_stop(tokens, {self.codec.special_id(IM_END.text)})
        text = self.codec.decode(body)
        if not found:
            return unparsed(text)
        thinking, rest = None, text
        if END_THINK.text in text:
            reasoning, _, rest = text.partition(END_THINK.text)
            thinking = reasoning.removeprefix(THINK.text).strip()
            if self.variant == "nano" and thinking:
                rest = rest.removeprefix("\n")
        content, _, calls_text = rest.partition(TOOL_CALL.text)
        if not calls_text:
            return assistant_message(content, thinking), True
        calls = parse_function_calls(TOOL_CALL.text + calls_text)
        if calls is None:
            return unparsed(text)
        return assistant_message(content.removesuffix("\n"), thinking, calls), True


def _scalar_text(value: Any) -> str:
    """The template's `|tojson` for objects and lists, `|string` for everything else."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value)
