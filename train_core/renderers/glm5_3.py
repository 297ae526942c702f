"""GLM-5.3 chat format (zai-org/GLM-5.3's template):

    [gMASK]<sop><|system|>Reasoning Effort: Max<|system|>{system}<|user|>{content}
    <|assistant|><think>{thinking}</think>{content}<|user|>...

(no line breaks between messages). Every prompt opens with the reasoning-effort system segment
(`Max`, `High` or `Low`: the renderer names); thinking cannot be turned off, so the generation
prompt always ends `<|assistant|><think>`, and that `<think>` is in the header of every assistant
message, untrained, since sampling is always given it. A message with no reasoning writes
`<think></think>`; the visible text is stripped, as the template does. Thinking is kept on every
message (the template's `clear_thinking` defaults to false).

There is no end-of-message token: an assistant turn ends with the next role token, `<|user|>`,
or `<|observation|>` after tool calls (with `<|endoftext|>`, the model's stop tokens). The reply
owns that token, trained with it, and the next message's header leaves it out, so the tokens are
the template's; the last reply of a supervised example gets it too (the template stops after the
content), since the model must learn to end its turn. Tool calls follow the text as
`<tool_call>{name}<arg_key>{key}</arg_key><arg_value>{value}</arg_value>...</tool_call>` (string
values raw, others JSON); consecutive tool results share one `<|observation|>`, each
`<tool_response>...</tool_response>`, sorted into the order of the calls when every call and
result has a distinct id (as the template sorts them)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from train_core.renderers.errors import RendererError
from train_core.renderers.messages import Message, ToolCall
from train_core.renderers.responses import assistant_message, split_at_stop, unparsed
from train_core.renderers.span_renderer import Span, SpanRenderer
from train_core.renderers.tokenizer import Part, Special, Tokenizer
from train_core.renderers.tool_calls import decode_argument_value, encode_argument_value, match_calls
from train_core.types import StopCondition

GMASK = Special("[gMASK]")
SOP = Special("<sop>")
SYSTEM = Special("<|system|>")
USER = Special("<|user|>")
ASSISTANT = Special("<|assistant|>")
OBSERVATION = Special("<|observation|>")
ENDOFTEXT = Special("<|endoftext|>")
THINK = Special("<think>")
END_THINK = Special("</think>")
TOOL_CALL = Special("<tool_call>")
END_TOOL_CALL = Special("</tool_call>")
ARG_KEY = Special("<arg_key>")
END_ARG_KEY = Special("</arg_key>")
ARG_VALUE = Special("<arg_value>")
END_ARG_VALUE = Special("</arg_value>")
TOOL_RESPONSE = Special("<tool_response>")
END_TOOL_RESPONSE = Special("</tool_response>")
ReasoningEffort = Literal["Max", "High", "Low"]
_ROLE_TOKENS = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT, "tool": OBSERVATION}
_CALL_RE = re.compile(re.escape(TOOL_CALL.text) + r"(.*?)" + re.escape(END_TOOL_CALL.text), re.DOTALL)
_ARGUMENT_RE = re.compile(
    re.escape(ARG_KEY.text)
    + r"(.*?)"
    + re.escape(END_ARG_KEY.text)
    + r"\s*"
    + re.escape(ARG_VALUE.text)
    + r"(.*?)"
    + re.escape(END_ARG_VALUE.text),
    re.DOTALL,
)


class Glm5_3Renderer(SpanRenderer):
    think_delimiters = (THINK.text, END_THINK.text)

    def __init__(self, tokenizer: Tokenizer, reasoning_effort: ReasoningEffort = "Max") -> None:
        super().__init__(tokenizer)
        self.reasoning_effort = reasoning_effort

    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        spans = [Span.preamble(GMASK, SOP, SYSTEM, f"Reasoning Effort: {self.reasoning_effort}")]
        order = _call_order(messages)
        for position, i in enumerate(order):
            message, role = messages[i], messages[i]["role"]
            previous = messages[order[position - 1]] if position else None
            following = messages[order[position + 1]] if position + 1 < len(order) else None
            if role not in _ROLE_TOKENS:
                raise RendererError(f"glm5_3 has no role {role!r} (message {i})")
            supplied = previous is not None and _terminator(previous, message) is not None
            grouped = role == "tool" and previous is not None and previous["role"] == "tool"
            header: list[Part] = [] if supplied or grouped else [_ROLE_TOKENS[role]]
            if role == "assistant":
                terminator = _terminator(message, following)
                if following is None and add_generation_prompt:
                    terminator = None  # the prompt writes the next header itself
                body = [*_assistant_body(message), *([terminator] if terminator else [])]
                spans += [Span.header(i, *header, THINK), Span.body(i, *body)]
            elif role == "tool":
                spans += [Span.header(i, *header), Span.body(i, TOOL_RESPONSE, message["content"], END_TOOL_RESPONSE)]
            else:
                spans += [Span.header(i, *header), Span.body(i, message["content"])]
        return spans

    def generation_header(self, messages: Sequence[Message], role: str) -> list[Part]:
        if role not in _ROLE_TOKENS:
            raise RendererError(f"glm5_3 cannot open a message of role {role!r}")
        return [_ROLE_TOKENS[role], *([THINK] if role == "assistant" else [])]

    def get_stop_sequences(self) -> StopCondition:
        return self._stop_ids()

    def _stop_ids(self) -> list[int]:
        return [self.codec.special_id(t.text) for t in (USER, OBSERVATION, ENDOFTEXT)]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        """The reply after the prompt's `<think>`: `{thinking}</think>{text}{tool calls}`."""
        body, found = split_at_stop(tokens, set(self._stop_ids()))
        text = self.codec.decode(body)
        if not found or END_THINK.text not in text:
            return unparsed(text)
        thinking, _, rest = text.partition(END_THINK.text)
        content, _, calls_text = rest.partition(TOOL_CALL.text)
        if not calls_text:
            return assistant_message(content, thinking), True
        calls = _parse_calls(TOOL_CALL.text + calls_text)
        return (assistant_message(content, thinking, calls), True) if calls else unparsed(text)


def _terminator(message: Message, following: Message | None) -> Special | None:
    """The role token that ends assistant `message`: `<|observation|>` after tool calls, else
    `<|user|>`; None when `message` is no assistant turn or the next message opens with another
    token (a system message, a tool result after a turn without calls: it keeps its header)."""
    if message["role"] != "assistant":
        return None
    token = OBSERVATION if message.get("tool_calls") else USER
    if following is None:
        return token
    return token if _ROLE_TOKENS.get(following["role"]) == token else None


def _assistant_body(message: Message) -> list[Part]:
    """After the header's `<think>`: the reasoning, `</think>`, the stripped text and the calls."""
    body: list[Part] = [message.get("thinking", ""), END_THINK, message["content"].strip()]
    for call in message.get("tool_calls") or []:
        body += [TOOL_CALL, call["name"]]
        for key, value in call["arguments"].items():
            body += [ARG_KEY, key, END_ARG_KEY, ARG_VALUE, encode_argument_value(value), END_ARG_VALUE]
        body.append(END_TOOL_CALL)
    return body


def _call_order(messages: Sequence[Message]) -> list[int]:
    """Message indices in render order: each run of tool results sorted into the order of the
    preceding assistant message's calls, when every call and result has a distinct id and every
    result answers one of the calls; otherwise as given."""
    order: list[int] = []
    i = 0
    while i < len(messages):
        if messages[i]["role"] != "tool":
            order.append(i)
            i += 1
            continue
        end = i
        while end + 1 < len(messages) and messages[end + 1]["role"] == "tool":
            end += 1
        run = list(range(i, end + 1))
        calls = messages[i - 1].get("tool_calls") or [] if i > 0 else []
        call_ids = [c.get("id") for c in calls]
        result_ids = [messages[k].get("tool_call_id") for k in run]
        sortable = (
            all(call_ids)
            and all(result_ids)
            and len(set(call_ids)) == len(call_ids)
            and len(set(result_ids)) == len(result_ids)
            and set(result_ids) <= set(call_ids)
        )
        if sortable:
            run.sort(key=lambda k: call_ids.index(messages[k].get("tool_call_id")))
        order += run
        i = end + 1
    return order


def _parse_calls(text: str) -> list[ToolCall] | None:
    calls: list[ToolCall] = []
    for (block,) in match_calls(_CALL_RE, text) or []:
        name, _, arguments_text = block.partition(ARG_KEY.text)
        arguments_text = ARG_KEY.text + arguments_text if arguments_text else ""
        if not name.strip() or _ARGUMENT_RE.sub("", arguments_text).strip():
            return None
        arguments = {key.strip(): decode_argument_value(value) for key, value in _ARGUMENT_RE.findall(arguments_text)}
        calls.append(ToolCall(name=name.strip(), arguments=arguments))
    return calls or None
