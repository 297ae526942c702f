"""Qwen3 chat format (ChatML with think blocks and Hermes-style tool calls):

    <|im_start|>system\n{content}<|im_end|>\n<|im_start|>user\n{content}<|im_end|>
    \n<|im_start|>assistant\n<think>\n{thinking}\n</think>\n\n{content}<|im_end|>

The `\n` between messages opens the next header, so it is never trained. As in Qwen3's own
template, an assistant message after the last user message shows its think block when it is the
last message or has thinking; earlier ones lose their thinking (`strip_thinking_from_history`).
Tool calls follow the content as `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`;
consecutive tool results share one `user` message of `<tool_response>` blocks.

Modes: `thinking` (Qwen3 hybrid models), `disabled` (the same with `enable_thinking=False`: an
empty think block opens the reply, in its header, and the reply's leading newlines are stripped
as the template does) and `instruct` (Qwen3-2507 Instruct: no think blocks at all).

Thinking in the non-thinking modes follows the templates: `instruct`'s template never writes
reasoning, so `thinking` is dropped from every message. `disabled` drops it from history (up to
the last user message) as the template does, and writes it, as the template does, on a
current-turn assistant message that is not the reply (a tool-calling step); on the reply being
trained, where the template would write it after a prompt that closed the think block, it is an
error. Unlike tinker-cookbook, which strips every non-reply message's thinking in `disabled` and
writes the reply's as `<think>...</think>` in `instruct`.

Weights, on purpose unlike tinker-cookbook: a tool result's `<tool_response>\n` opener is header
(trained only under ALL_TOKENS) and its `\n</tool_response>` closer is body, trained with the
result when tool messages are selected (ALL_MESSAGES, CUSTOMIZED); the cookbook puts the opener in
the body too, so it trains it with the result. The opener is the format's, not the tool's words,
just as a role header is. Both agree under the default LAST_ASSISTANT_MESSAGE, which never
trains a tool result."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Literal

from train_core.renderers.messages import Message, ToolCall, reject_trained_thinking
from train_core.renderers.responses import assistant_message, split_at_stop, unparsed
from train_core.renderers.span_renderer import Span, SpanPart, SpanRenderer
from train_core.renderers.tokenizer import Part, Special, Tokenizer
from train_core.renderers.tool_calls import decode_named_call, encode_named_call, match_calls
from train_core.renderers.tool_declarations import ToolSpec, qwen3_tools_prompt, with_system_text
from train_core.types import StopCondition

IM_START = Special("<|im_start|>")
IM_END = Special("<|im_end|>")
THINK = Special("<think>")
END_THINK = Special("</think>")
TOOL_CALL = Special("<tool_call>")
END_TOOL_CALL = Special("</tool_call>")
TOOL_RESPONSE = Special("<tool_response>")
END_TOOL_RESPONSE = Special("</tool_response>")
EMPTY_THINK_BLOCK: tuple[Part, ...] = (THINK, "\n\n", END_THINK, "\n\n")
_TOOL_CALL_RE = re.compile(re.escape(TOOL_CALL.text) + r"(.*?)" + re.escape(END_TOOL_CALL.text), re.DOTALL)

ThinkingMode = Literal["thinking", "disabled", "instruct"]
_NAMES: dict[ThinkingMode, str] = {
    "thinking": "qwen3",
    "disabled": "qwen3_disable_thinking",
    "instruct": "qwen3_instruct",
}


class Qwen3Renderer(SpanRenderer):
    think_delimiters = (THINK.text, END_THINK.text)
    declares_tools = True

    prompt_opens_think_block = False
    """Whether the generation prompt ends with `<think>\n` (Qwen3-VL Thinking's template); that
    opening is then in the header of each assistant message that starts with it, untrained."""

    def __init__(
        self, tokenizer: Tokenizer, mode: ThinkingMode = "thinking", strip_thinking_from_history: bool = True
    ) -> None:
        super().__init__(tokenizer)
        self.mode = mode
        self.strip_thinking_from_history = strip_thinking_from_history

    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        last_query = _last_query_index(messages)
        spans: list[Span] = []
        for i, message in enumerate(messages):
            opener: list[Part] = ["\n"] if i > 0 else []
            if message["role"] == "tool":
                spans += _tool_spans(i, messages, opener)
            elif message["role"] == "assistant":
                spans += self._assistant_spans(i, message, opener, last_query, len(messages), add_generation_prompt)
            else:
                spans.append(Span.header(i, *opener, IM_START, f"{message['role']}\n"))
                spans.append(Span.body(i, *self.content_parts(i, message), IM_END))
        return spans

    def content_parts(self, index: int, message: Message) -> list[SpanPart]:
        """What a system or user message's content renders as (its text; images in Qwen-VL)."""
        return [message["content"]]

    def _assistant_spans(
        self, i: int, message: Message, opener: list[Part], last_query: int, count: int, add_generation_prompt: bool
    ) -> list[Span]:
        header: list[Part] = [*opener, IM_START, "assistant\n"]
        body: list[Part] = []
        content = message["content"]
        thinking = message.get("thinking", "")
        current, is_last = i > last_query, i == count - 1
        block: str | None = None  # the reasoning of the think block written before the content
        if self.mode == "thinking":
            if (current and (is_last or thinking)) or (thinking and not self.strip_thinking_from_history):
                block = thinking
        elif self.mode == "disabled" and current and (is_last or thinking):
            if is_last and not add_generation_prompt:
                reject_trained_thinking(_NAMES[self.mode], "qwen3", i, message)
            if is_last and not thinking:
                header += EMPTY_THINK_BLOCK
                content = content.lstrip("\n")
            else:
                block = thinking
        if block is not None:
            content, reasoning = content.lstrip("\n"), block.strip("\n")
            opening: list[Part] = [THINK, "\n"]
            header, body = (header + opening, body) if self.opens_think_block else (header, body + opening)
            body += [f"{reasoning}\n", END_THINK, "\n\n"]
        body.append(content)
        for j, call in enumerate(message.get("tool_calls") or []):
            if j > 0 or message["content"]:  # the template tests the text before stripping it
                body.append("\n")
            body += [TOOL_CALL, f"\n{encode_named_call(call)}\n", END_TOOL_CALL]
        body.append(IM_END)
        return [Span.header(i, *header), Span.body(i, *body)]

    def declare_tools(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[Message]:
        return with_system_text(messages, qwen3_tools_prompt(tools), before_system=False)

    def tool_call_prefill(self, name: str | None = None) -> str:
        # in thinking mode an empty think block first, as the template writes when thinking is off
        # (closing the one the prompt opened, where it opens one)
        opener = "<think>\n\n</think>\n\n" if self.mode == "thinking" else ""
        if self.opens_think_block:
            opener = opener.removeprefix("<think>\n")
        opener += f"{TOOL_CALL.text}\n"
        return opener if name is None else opener + f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": '

    def generation_header(self, messages: Sequence[Message], role: str) -> list[Part]:
        header: list[Part] = ["\n"] if messages else []
        header += [IM_START, f"{role}\n"]
        if self.mode == "disabled" and role == "assistant":
            header += EMPTY_THINK_BLOCK
        if self.opens_think_block and role == "assistant":
            header += [THINK, "\n"]
        return header

    @property
    def opens_think_block(self) -> bool:
        return self.prompt_opens_think_block and self.mode == "thinking"

    def get_stop_sequences(self) -> StopCondition:
        return [self.codec.special_id(IM_END.text)]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        body, found = split_at_stop(tokens, {self.codec.special_id(IM_END.text)})
        text = self.codec.decode(body)
        if not found:
            return unparsed(text)
        thinking, rest = None, text
        if END_THINK.text in text:
            reasoning, _, rest = text.partition(END_THINK.text)
            thinking = reasoning.rstrip("\n").split(THINK.text)[-1].lstrip("\n")
            rest = rest.lstrip("\n")
        content, _, calls_text = rest.partition(TOOL_CALL.text)
        if not calls_text:
            return assistant_message(content, thinking), True
        calls = _parse_tool_calls(TOOL_CALL.text + calls_text)
        if calls is None:
            return unparsed(text)
        return assistant_message(content.removesuffix("\n"), thinking, calls), True


def _last_query_index(messages: Sequence[Message]) -> int:
    """The last user message; with none, the last message (so no assistant counts as current)."""
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    return users[-1] if users else len(messages) - 1


def _tool_spans(i: int, messages: Sequence[Message], opener: list[Part]) -> list[Span]:
    follows_tool = i > 0 and messages[i - 1]["role"] == "tool"
    precedes_tool = i + 1 < len(messages) and messages[i + 1]["role"] == "tool"
    header: list[Part] = [] if follows_tool else [*opener, IM_START, "user"]
    header += ["\n", TOOL_RESPONSE, "\n"]
    body: list[Part] = [messages[i]["content"], "\n", END_TOOL_RESPONSE]
    if not precedes_tool:
        body.append(IM_END)
    return [Span.header(i, *header), Span.body(i, *body)]


def _parse_tool_calls(text: str) -> list[ToolCall] | None:
    """Every `<tool_call>` block of a response; None when one is not a valid call."""
    blocks = match_calls(_TOOL_CALL_RE, text)
    calls = [decode_named_call(block.strip()) for (block,) in blocks or []]
    return None if not calls or None in calls else [c for c in calls if c is not None]
