"""DeepSeek V4.1 chat format (deepseek-ai/DeepSeek-V4.1-Flash's template):

    <｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, ...)\\n\\n{system}
    <｜User｜>{content}<｜Assistant｜><think>{thinking}</think>{content}<｜end▁of▁sentence｜>

(no line breaks between messages). In thinking mode every prompt opens with `<｜System｜>` and the
reasoning-effort line (75 high, the template's default; 50 low; 100 max), even without a system
message; in chat mode (`deepseekv4_1_disable_thinking`) there is no effort line and the reply
opens with `</think>`. A user turn is every consecutive user and tool message, joined by a blank
line, a tool result written `<tool_result>...</tool_result>` and the results sorted into the order
of the calls they answer (by id; a result with an unknown id sorts first, the sort is stable). A
later system message counts as a user turn. Tool calls follow the answer as one DSML block:

    \\n\\n<｜DSML｜ calls>\\n<｜DSML｜ invoke name="{name}">\\n
    <｜DSML｜ parameter name="{key}" string="true|false">{value}</｜DSML｜ parameter>
    \\n</｜DSML｜ invoke>\\n</｜DSML｜ calls>

(string values raw with string="true", others JSON). Reasoning before the last user turn is
dropped, as the template's `drop_thinking` does, unless `preserve_thinking`
(`deepseekv4_1_preserve_thinking`); in chat mode the template writes no reasoning anywhere, so it
is dropped from every message, the reply included, as tinker-cookbook does too. The reply's
`<think>` is in its header (the generation prompt's last token).

Unlike tinker-cookbook, which encodes a whole user turn as one string, each message of a turn is
encoded on its own (its blank-line separator is its header), so turns weigh per message."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from train_core.renderers.errors import RendererError
from train_core.renderers.messages import Message, ToolCall
from train_core.renderers.responses import assistant_message, split_at_stop, unparsed
from train_core.renderers.span_renderer import Span, SpanRenderer
from train_core.renderers.tokenizer import Part, Special, Tokenizer
from train_core.renderers.tool_calls import encode_argument_value
from train_core.types import StopCondition

BOS = Special("<｜begin▁of▁sentence｜>")
EOS = Special("<｜end▁of▁sentence｜>")
USER = Special("<｜User｜>")
ASSISTANT = Special("<｜Assistant｜>")
THINK = Special("<think>")
END_THINK = Special("</think>")
SYSTEM = "<｜System｜>"  # written as text: the tokenizer maps it to its token where it has one
CALLS_OPEN, CALLS_CLOSE = "<｜DSML｜ calls>", "</｜DSML｜ calls>"
REASONING_BUDGETS = {"low": 50, "high": 75, "max": 100}
_CALLS_RE = re.compile(r"(?:\n\n)?" + re.escape(CALLS_OPEN) + r"\n(.*?)\n" + re.escape(CALLS_CLOSE), re.DOTALL)
_INVOKE_RE = re.compile(r'<｜DSML｜ invoke name="([^"]*)">\n(.*?)\n</｜DSML｜ invoke>', re.DOTALL)
_PARAMETER_RE = re.compile(
    r'<｜DSML｜ parameter name="([^"]*)" string="(true|false)">(.*?)</｜DSML｜ parameter>', re.DOTALL
)


def effort_line(budget: int) -> str:
    return f"Reasoning Effort: {budget} (range 1-100, the higher the value, the more thorough the reasoning)\n\n"


class DeepSeekV4Renderer(SpanRenderer):
    """`reasoning_budget` None is chat mode (thinking off)."""

    think_delimiters = (THINK.text, END_THINK.text)

    def __init__(
        self, tokenizer: Tokenizer, reasoning_budget: int | None = 75, preserve_thinking: bool = False
    ) -> None:
        super().__init__(tokenizer)
        self.reasoning_budget = reasoning_budget
        self.preserve_thinking = preserve_thinking

    @property
    def thinking(self) -> bool:
        return self.reasoning_budget is not None

    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        spans = [Span.preamble(BOS)]
        if self.thinking:
            spans.append(Span.preamble(SYSTEM, effort_line(self.reasoning_budget or 0)))
        drop_through = -1 if self.preserve_thinking or not self.thinking else _last_user_turn(messages)
        order = _turn_order(messages)
        for position, i in enumerate(order):
            message, role = messages[i], messages[i]["role"]
            previous = messages[order[position - 1]] if position else None
            if role == "system" and i == 0:
                spans += [Span.header(i, *([] if self.thinking else [SYSTEM])), Span.body(i, message["content"])]
            elif role == "system":
                spans += [Span.header(i, SYSTEM), Span.body(i, message["content"])]
            elif role in ("user", "tool"):
                in_turn = previous is not None and previous["role"] in ("user", "tool")
                block = f"<tool_result>{message['content']}</tool_result>" if role == "tool" else message["content"]
                spans += [Span.header(i, "\n\n" if in_turn else USER), Span.body(i, block)]
            elif role == "assistant":
                keeps = i > drop_through and self.thinking
                header: list[Part] = [ASSISTANT, THINK if keeps else END_THINK] if _opens_reply(previous, i) else []
                body: list[Part] = [message.get("thinking", ""), END_THINK] if keeps else []
                body.append(message["content"])
                if calls := message.get("tool_calls"):
                    body.append(_calls_block(calls))
                spans += [Span.header(i, *header), Span.body(i, *body, EOS)]
            else:
                raise RendererError(f"deepseekv4_1 has no role {role!r} (message {i})")
        return spans

    def generation_header(self, messages: Sequence[Message], role: str) -> list[Part]:
        if role == "user":
            return [USER]
        if role != "assistant":
            raise RendererError(f"deepseekv4_1 cannot open a message of role {role!r}")
        previous = messages[_turn_order(messages)[-1]] if messages else None
        return [ASSISTANT, THINK if self.thinking else END_THINK] if _opens_reply(previous, len(messages)) else []

    def get_stop_sequences(self) -> StopCondition:
        return [self.codec.special_id(EOS.text)]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        """The reply after the prompt: `{thinking}</think>{answer}{calls}` in thinking mode."""
        body, found = split_at_stop(tokens, {self.codec.special_id(EOS.text)})
        text = self.codec.decode(body)
        if not found:
            return unparsed(text)
        thinking, rest = None, text
        if self.thinking and END_THINK.text in text:
            thinking, _, rest = text.partition(END_THINK.text)
        block = _CALLS_RE.search(rest)
        if block is None:
            return unparsed(text) if "｜DSML｜" in rest else (assistant_message(rest, thinking), True)
        calls = _parse_invokes(block.group(1))
        if calls is None or rest[block.end() :].strip():
            return unparsed(text)
        return assistant_message(rest[: block.start()], thinking, calls), True


def _opens_reply(previous: Message | None, index: int) -> bool:
    """An assistant message after a user turn (or a later system message) opens with the marker."""
    return previous is not None and (
        previous["role"] in ("user", "tool") or (previous["role"] == "system" and index > 1)
    )


def _last_user_turn(messages: Sequence[Message]) -> int:
    return max(
        (i for i, m in enumerate(messages) if m["role"] in ("user", "tool") or (m["role"] == "system" and i > 0)),
        default=-1,
    )


def _turn_order(messages: Sequence[Message]) -> list[int]:
    """Message indices in render order: within each user turn, tool results take the slots tool
    messages hold, stably sorted by the position of the call they answer (an unknown id: 0)."""
    order: list[int] = []
    call_order: dict[str, int] = {}
    i = 0
    while i < len(messages):
        if calls := messages[i].get("tool_calls"):
            call_order = {c["id"]: k for k, c in enumerate(calls) if c.get("id")}
        if messages[i]["role"] not in ("user", "tool"):
            order.append(i)
            i += 1
            continue
        end = i
        while end + 1 < len(messages) and messages[end + 1]["role"] in ("user", "tool"):
            end += 1
        turn = list(range(i, end + 1))
        tools = iter(
            sorted(
                (k for k in turn if messages[k]["role"] == "tool"),
                key=lambda k: call_order.get(messages[k].get("tool_call_id", ""), 0),
            )
        )
        order += [next(tools) if messages[k]["role"] == "tool" else k for k in turn]
        i = end + 1
    return order


def _calls_block(calls: Sequence[ToolCall]) -> str:
    invokes = []
    for call in calls:
        parameters = "\n".join(
            f'<｜DSML｜ parameter name="{key}" string="{"true" if isinstance(value, str) else "false"}">'
            f"{encode_argument_value(value)}</｜DSML｜ parameter>"
            for key, value in call["arguments"].items()
        )
        invokes.append(f'<｜DSML｜ invoke name="{call["name"]}">\n{parameters}\n</｜DSML｜ invoke>')
    return f"\n\n{CALLS_OPEN}\n" + "\n".join(invokes) + f"\n{CALLS_CLOSE}"


def _parse_invokes(text: str) -> list[ToolCall] | None:
    invokes = list(_INVOKE_RE.finditer(text))
    if not invokes or _INVOKE_RE.sub("", text).strip():
        return None
    calls: list[ToolCall] = []
    for invoke in invokes:
        name, parameters = invoke.groups()
        if not name.strip() or _PARAMETER_RE.sub("", parameters).strip():
            return None
        arguments = {}
        for key, is_string, value in _PARAMETER_RE.findall(parameters):
            try:
                arguments[key] = value if is_string == "true" else json.loads(value)
            except json.JSONDecodeError:
                return None
        calls.append(ToolCall(name=name, arguments=arguments))
    return calls
