"""Qwen3.5 / Qwen3.6 and Qwen3.8 chat format (ChatML, think blocks, XML tool calls):

    <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{content}<|im_end|>
    \n<|im_start|>assistant\n<think>\n{thinking}\n</think>\n\n{content}<|im_end|>

As Qwen3 (`qwen3.py`) but, following the models' templates: every message's content is trimmed;
the generation prompt always opens `<think>\n` (thinking) or writes the empty block
`<think>\n\n</think>\n\n` (`enable_thinking=False`); every assistant message after the last
user query gets a think block, empty when it did not reason; a tool call is

    <tool_call>\n<function={name}>\n<parameter={key}>\n{value}\n</parameter>\n</function>\n</tool_call>

(string values raw, others JSON), after a blank line when the message has text; consecutive tool
results share one `user` message of `\n<tool_response>\n...\n</tool_response>` blocks.

History thinking: Qwen3.5/3.6 drop the reasoning (and the block) of assistant messages up to the
last user query unless `preserve_thinking` (`qwen3_5_preserve_thinking`); Qwen3.8 preserves it by
default, so every assistant message has its block. Qwen3.8 also takes a reasoning effort: `xhigh`
(the template's default) and `low` write an instruction sentence at the top of the system
message (creating one when there is none), `medium` writes none, and with thinking disabled there
is none; and an empty system message renders nothing.

Where this differs from tinker-cookbook, it follows the templates (checked against them byte for
byte in `tests/train_core/renderers/test_renderers_official_templates.py`): a current-turn assistant
message that is not the reply (a tool-calling step) keeps its reasoning, which the cookbook's
`qwen3_5` strips; with `preserve_thinking` every assistant message gets its block, empty when it
did not reason, where the cookbook writes none; and a boolean or null argument is JSON (`true`,
`null`) as the Qwen3.6 template writes it, where the cookbook's `qwen3_5` writes Python's `True`,
`None`. The `<think>\n` (or the empty block) that the generation prompt supplies is in the header
of each assistant message that starts with it, untrained, since sampling is always given it.

A thinking-disabled renderer drops history reasoning where the template drops it; reasoning on
the reply being trained, which the template would write after a prompt that closed the block, is
an error."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from train_core.renderers.errors import RendererError
from train_core.renderers.messages import Message, ToolCall, reject_trained_thinking
from train_core.renderers.responses import assistant_message, split_at_stop, unparsed
from train_core.renderers.span_renderer import Span, SpanRenderer
from train_core.renderers.tokenizer import Part, Special, Tokenizer
from train_core.renderers.tool_calls import decode_argument_value, encode_argument_value, match_calls
from train_core.renderers.tool_declarations import ToolSpec, qwen3_5_tools_prompt, with_system_text
from train_core.types import StopCondition

IM_START = Special("<|im_start|>")
IM_END = Special("<|im_end|>")
THINK = Special("<think>")
END_THINK = Special("</think>")
TOOL_CALL = Special("<tool_call>")
END_TOOL_CALL = Special("</tool_call>")
TOOL_RESPONSE = Special("<tool_response>")
END_TOOL_RESPONSE = Special("</tool_response>")
OPEN_BLOCK: tuple[Part, ...] = (THINK, "\n")
EMPTY_BLOCK: tuple[Part, ...] = (THINK, "\n\n", END_THINK, "\n\n")
ReasoningEffort = Literal["xhigh", "medium", "low"]
REASONING_INSTRUCTIONS: dict[str, str] = {
    "xhigh": "Reasoning effort is set to xhigh. Please think carefully through the task, validate key assumptions, "
    "consider plausible alternatives, and prioritize correctness, consistency, and clarity in the final answer.",
    "medium": "",
    "low": "Reasoning effort is set to low. Keep your thinking brief and focused, moving directly to the "
    "conclusion without unnecessary elaboration.",
}
_CALL_RE = re.compile(re.escape(TOOL_CALL.text) + r"(.*?)" + re.escape(END_TOOL_CALL.text), re.DOTALL)
_FUNCTION_RE = re.compile(r"\s*<function=([^>\n]+)>\n(.*?)</function>\s*", re.DOTALL)
_PARAMETER_RE = re.compile(r"<parameter=([^>\n]+)>\n(.*?)\n</parameter>\n", re.DOTALL)


class Qwen3_5Renderer(SpanRenderer):
    """`version` "3.5" (Qwen3.5 / 3.6) or "3.8"; `reasoning_effort` only for 3.8 (default xhigh)."""

    think_delimiters = (THINK.text, END_THINK.text)

    declares_tools = True

    def __init__(
        self,
        tokenizer: Tokenizer,
        name: str = "qwen3_5",
        version: Literal["3.5", "3.8"] = "3.5",
        thinking: bool = True,
        preserve_thinking: bool | None = None,
        reasoning_effort: ReasoningEffort | None = None,
    ) -> None:
        super().__init__(tokenizer)
        if reasoning_effort is not None and version != "3.8":
            raise RendererError("reasoning_effort is a Qwen3.8 template option")
        self.name = name
        self.version = version
        self.thinking = thinking
        self.preserve_thinking = version == "3.8" if preserve_thinking is None else preserve_thinking
        effort = reasoning_effort or "xhigh"
        self.instructions = REASONING_INSTRUCTIONS[effort] if version == "3.8" and thinking else ""

    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        last_query = _last_query_index(messages)
        spans: list[Span] = []
        if self.instructions and (not messages or messages[0]["role"] != "system"):
            spans.append(Span.preamble(IM_START, f"system\n{self.instructions}", IM_END))
        for i, message in enumerate(messages):
            opener: list[Part] = ["\n"] if spans else []
            role, content = message["role"], message["content"].strip()
            if role == "system":
                if i > 0:
                    raise RendererError(f"{self.name} renders a system message only first; message {i} is one")
                spans += self._system_spans(content)
            elif role == "user":
                spans += [Span.header(i, *opener, IM_START, "user\n"), Span.body(i, content, IM_END)]
            elif role == "tool":
                spans += _tool_spans(i, messages, opener, content)
            elif role == "assistant":
                replying = i == len(messages) - 1 and not add_generation_prompt
                spans += self._assistant_spans(i, message, opener, i > last_query, replying)
            else:
                raise RendererError(f"{self.name} has no role {role!r} (message {i})")
        return spans

    def declare_tools(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[Message]:
        return with_system_text(messages, qwen3_5_tools_prompt(tools), before_system=True)

    def _system_spans(self, content: str) -> list[Span]:
        if self.version == "3.8" and not content:
            return [Span.preamble(IM_START, f"system\n{self.instructions}", IM_END)] if self.instructions else []
        prefix = f"{self.instructions}\n\n" if self.instructions else ""
        return [Span.header(0, IM_START, f"system\n{prefix}"), Span.body(0, content, IM_END)]

    def _assistant_spans(
        self, i: int, message: Message, opener: list[Part], current: bool, replying: bool
    ) -> list[Span]:
        header: list[Part] = [*opener, IM_START, "assistant\n"]
        body: list[Part] = []
        content = message["content"].strip()
        reasoning = message.get("thinking", "").strip()
        if self.preserve_thinking or current:
            if not self.thinking and replying:
                thinking_name = "qwen3_8_xhigh_reasoning" if self.version == "3.8" else "qwen3_5"
                reject_trained_thinking(self.name, thinking_name, i, message)
            if not self.thinking and not reasoning:
                header += EMPTY_BLOCK
            else:
                header += OPEN_BLOCK
                body += [f"{reasoning}\n", END_THINK, "\n\n"]
        body.append(content)
        for j, call in enumerate(message.get("tool_calls") or []):
            separator = "\n" if j else ("\n\n" if content else "")
            body += [separator, TOOL_CALL, f"\n{function_block(call)}\n", END_TOOL_CALL]
        return [Span.header(i, *header), Span.body(i, *body, IM_END)]

    def tool_call_prefill(self, name: str | None = None) -> str:
        # thinking on: the prompt opened the think block, which the prefill closes empty
        opener = f"\n{END_THINK.text}\n\n" if self.thinking else ""
        opener += f"{TOOL_CALL.text}\n"
        return opener if name is None else opener + f"<function={name}>\n"

    def generation_header(self, messages: Sequence[Message], role: str) -> list[Part]:
        opener: list[Part] = ["\n"] if messages or self.instructions else []
        header: list[Part] = [*opener, IM_START, f"{role}\n"]
        if role == "assistant":
            header += OPEN_BLOCK if self.thinking else EMPTY_BLOCK
        return header

    def get_stop_sequences(self) -> StopCondition:
        return [self.codec.special_id(IM_END.text)]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        """The reply after the generation prompt: `{thinking}\n</think>\n\n{content}` when thinking
        is on (the prompt opened the block), `{content}` when it is off."""
        body, found = split_at_stop(tokens, {self.codec.special_id(IM_END.text)})
        text = self.codec.decode(body)
        if not found:
            return unparsed(text)
        thinking, rest = None, text
        if self.thinking and END_THINK.text in text:
            reasoning, _, rest = text.partition(END_THINK.text)
            thinking, rest = reasoning.strip(), rest.removeprefix("\n\n")
        content, _, calls_text = rest.partition(TOOL_CALL.text)
        if not calls_text:
            return assistant_message(content, thinking), True
        calls = parse_function_calls(TOOL_CALL.text + calls_text)
        if calls is None:
            return unparsed(text)
        return assistant_message(content.removesuffix("\n\n"), thinking, calls), True


def _last_query_index(messages: Sequence[Message]) -> int:
    """The last user message that is not a wrapped tool result (as the templates find it)."""
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i]["content"].strip()
        wrapped = content.startswith(TOOL_RESPONSE.text) and content.endswith(END_TOOL_RESPONSE.text)
        if messages[i]["role"] == "user" and not wrapped:
            return i
    return len(messages) - 1


def _tool_spans(i: int, messages: Sequence[Message], opener: list[Part], content: str) -> list[Span]:
    follows_tool = i > 0 and messages[i - 1]["role"] == "tool"
    precedes_tool = i + 1 < len(messages) and messages[i + 1]["role"] == "tool"
    header: list[Part] = [] if follows_tool else [*opener, IM_START, "user"]
    header += ["\n", TOOL_RESPONSE, "\n"]
    body: list[Part] = [content, "\n", END_TOOL_RESPONSE]
    return [Span.header(i, *header), Span.body(i, *body, *([] if precedes_tool else [IM_END]))]


def function_block(call: ToolCall, encode: Callable[[Any], str] = encode_argument_value) -> str:
    """`<function={name}>` with a `<parameter={key}>` per argument, as in a `<tool_call>`."""
    parameters = "".join(
        f"<parameter={key}>\n{encode(value)}\n</parameter>\n" for key, value in call["arguments"].items()
    )
    return f"<function={call['name']}>\n{parameters}</function>"


def parse_function_calls(text: str) -> list[ToolCall] | None:
    blocks = match_calls(_CALL_RE, text)
    calls: list[ToolCall] = []
    for (block,) in blocks or []:
        function = _FUNCTION_RE.fullmatch(block)
        if function is None:
            return None
        name, parameters = function.groups()
        if _PARAMETER_RE.sub("", parameters).strip():
            return None
        arguments = {key: decode_argument_value(value) for key, value in _PARAMETER_RE.findall(parameters)}
        calls.append(ToolCall(name=name, arguments=arguments))
    return calls or None
