"""gpt-oss chat format (OpenAI harmony):

    <|start|>system<|message|>You are ChatGPT, ...Reasoning: medium...<|end|>
    <|start|>developer<|message|># Instructions\n\n{system content}\n\n<|end|>
    <|start|>user<|message|>{content}<|end|>
    <|start|>assistant<|channel|>analysis<|message|>{thinking}<|end|>
    <|start|>assistant<|channel|>final<|message|>{content}<|return|>

The reasoning-effort system prompt is optional (`reasoning_effort=None` leaves it out). A first
system message becomes the developer message (none when it is empty); a later one is an error,
since the template silently drops it. The reply being trained ends with `<|return|>` and shows its
analysis; history replies end with `<|end|>` and drop it. A tool call is its own assistant message,
`<|start|>assistant to=functions.{name}<|channel|>commentary <|constrain|>json<|message|>{args}<|call|>`,
keeping its analysis until a later final answer; one call per message, since `<|call|>` stops
sampling. Tool results come from `functions.{name} to=assistant` on the commentary channel.

Where Hugging Face's gpt-oss template departs from harmony (a call message's text on the
analysis channel, `commentary json` without `<|constrain|>`, tool results JSON-quoted, a call's
reasoning dropped before the reply being trained), this writes harmony, as tinker-cookbook does;
each is a named difference in `tests/train_core/renderers/test_renderers_official_templates.py`.

Weights, on purpose unlike tinker-cookbook: for user, developer and tool-result messages the
header runs through `<|message|>` (`<|start|>user<|message|>`,
`<|start|>functions.{name} to=assistant<|channel|>commentary<|message|>`), so those wrapper tokens
are trained only under ALL_TOKENS; the cookbook's header stops at the role, so it trains them with
the message body (ALL_MESSAGES, ALL_USER_AND_SYSTEM_MESSAGES, CUSTOMIZED). Assistant messages
match the cookbook: the header is `<|start|>assistant`, and the channel markers are body, trained
with the reply, since the model samples them itself."""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from typing import Literal

from train_core.renderers.errors import RendererError
from train_core.renderers.messages import Message, ToolCall
from train_core.renderers.responses import assistant_message, split_at_stop, unparsed
from train_core.renderers.span_renderer import Span, SpanRenderer
from train_core.renderers.tokenizer import Part, Special, Tokenizer
from train_core.renderers.tool_calls import decode_arguments, encode_arguments
from train_core.types import StopCondition

START = Special("<|start|>")
END = Special("<|end|>")
MESSAGE = Special("<|message|>")
CHANNEL = Special("<|channel|>")
CONSTRAIN = Special("<|constrain|>")
RETURN = Special("<|return|>")
CALL = Special("<|call|>")
ReasoningEffort = Literal["low", "medium", "high"]
_RECIPIENT_RE = re.compile(r"to=functions\.([^\s<]+)")
_CHANNEL_RE = re.compile(re.escape(CHANNEL.text) + r"(\w+)")


def system_prompt(reasoning_effort: ReasoningEffort, current_date: str) -> str:
    return (
        "You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\n"
        f"Current date: {current_date}\n\n"
        f"Reasoning: {reasoning_effort}\n\n"
        "# Valid channels: analysis, commentary, final. Channel must be included for every message."
    )


class GptOssRenderer(SpanRenderer):
    def __init__(
        self,
        tokenizer: Tokenizer,
        reasoning_effort: ReasoningEffort | None = None,
        current_date: str | None = None,
    ) -> None:
        """`current_date` (YYYY-MM-DD) defaults to today, as gpt-oss's own template does."""
        super().__init__(tokenizer)
        self.reasoning_effort = reasoning_effort
        self.current_date = current_date

    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        spans: list[Span] = []
        if self.reasoning_effort is not None:
            date = self.current_date or datetime.date.today().isoformat()
            spans.append(Span.preamble(START, "system", MESSAGE, system_prompt(self.reasoning_effort, date), END))
        last = len(messages) - 1
        # The reply being trained does not count as later history, as in generation.
        history_end = len(messages) if add_generation_prompt else last
        for i, message in enumerate(messages):
            role = message["role"]
            if role == "assistant":
                replying = i == last and not add_generation_prompt
                later = messages[i + 1 : history_end]
                answered = any(m["role"] == "assistant" and not m.get("tool_calls") for m in later)
                spans.append(Span.header(i, START, "assistant"))
                spans.append(Span.body(i, *_assistant_body(i, message, replying, answered)))
            elif role == "tool":
                name = _tool_name(i, messages)
                spans.append(Span.header(i, START, f"functions.{name} to=assistant", CHANNEL, "commentary", MESSAGE))
                spans.append(Span.body(i, message["content"], END))
            elif role == "system":
                if i > 0:
                    raise RendererError(
                        f"gpt-oss renders a system message only first, as its developer message (the template "
                        f"drops a later one); message {i} is one"
                    )
                if message["content"]:  # an empty one writes no developer message, as in the template
                    spans.append(Span.header(i, START, "developer", MESSAGE))
                    spans.append(Span.body(i, f"# Instructions\n\n{message['content']}\n\n", END))
            else:
                spans.append(Span.header(i, START, role, MESSAGE))
                spans.append(Span.body(i, message["content"], END))
        return spans

    def generation_header(self, messages: Sequence[Message], role: str) -> list[Part]:
        return [START, role] if role == "assistant" else [START, role, MESSAGE]

    def get_stop_sequences(self) -> StopCondition:
        return self._stop_ids()

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        body, found = split_at_stop(tokens, set(self._stop_ids()))
        text = self.codec.decode(body)
        if not found:
            return unparsed(text)
        thinking: list[str] = []
        content: list[str] = []
        calls: list[ToolCall] = []
        for segment in text.split(START.text + "assistant"):
            header, has_message, payload = segment.partition(MESSAGE.text)
            payload = payload.removesuffix(END.text)
            recipient = _RECIPIENT_RE.search(header)
            channel = _CHANNEL_RE.search(header)
            if not has_message or channel is None:
                return unparsed(text)
            if recipient:
                arguments = decode_arguments(payload)
                if arguments is None:
                    return unparsed(text)
                calls.append(ToolCall(name=recipient.group(1), arguments=arguments))
            elif channel.group(1) == "analysis":
                thinking.append(payload)
            else:
                content.append(payload)
        return assistant_message("".join(content), "".join(thinking), calls), True

    def _stop_ids(self) -> list[int]:
        return [self.codec.special_id(RETURN.text), self.codec.special_id(CALL.text)]


def _assistant_body(i: int, message: Message, replying: bool, answered: bool) -> list[Part]:
    """The channels of one assistant message, after its `<|start|>assistant` header."""
    calls = message.get("tool_calls") or []
    thinking = message.get("thinking", "")
    next_channel: list[Part] = [END, START, "assistant"]
    body: list[Part] = []
    if calls:
        if len(calls) > 1:
            raise RendererError(f"gpt-oss renders one tool call per assistant message; message {i} has {len(calls)}")
        if thinking and not answered:
            body += [CHANNEL, "analysis", MESSAGE, thinking, *next_channel]
        if message["content"]:
            body += [CHANNEL, "commentary", MESSAGE, message["content"], *next_channel]
        call = calls[0]
        return [
            *body,
            f" to=functions.{call['name']}",
            CHANNEL,
            "commentary ",
            CONSTRAIN,
            "json",
            MESSAGE,
            encode_arguments(call["arguments"]),
            CALL,
        ]
    if replying and thinking:
        body += [CHANNEL, "analysis", MESSAGE, thinking, *next_channel]
    return [*body, CHANNEL, "final", MESSAGE, message["content"], RETURN if replying else END]


def _tool_name(i: int, messages: Sequence[Message]) -> str:
    """A tool result's `name`, else the name of the latest tool call before it."""
    if name := messages[i].get("name"):
        return name
    for message in reversed(messages[:i]):
        if calls := message.get("tool_calls"):
            return calls[-1]["name"]
    raise RendererError(f"gpt-oss needs the tool name of tool message {i}: give it a 'name' or follow a tool call")
