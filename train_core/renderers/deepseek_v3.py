"""DeepSeek V3.1 chat format (the separator in special tokens is the fullwidth bar U+FF5C):

    <｜begin▁of▁sentence｜>{system}<｜User｜>{content}<｜Assistant｜></think>{content}<｜end▁of▁sentence｜>

System messages have no role token: they open the conversation right after BOS (joined by a blank
line); a later system message is an error unless `system_role_as_user` maps it to a user message.
Only assistant messages end with `<｜end▁of▁sentence｜>`. As in DeepSeek's own template, history
assistant messages never show their thinking (`</think>` closes an empty think block in the
header), tool results are `<｜tool▁output▁begin｜>...<｜tool▁output▁end｜>`, and the assistant
message after a tool result has no header at all.

Thinking is off by default, as in DeepSeek's template and in tinker-cookbook (`deepseekv3` and
its alias `deepseekv3_disable_thinking`): the reply opens with `</think>`. The template never
writes a message's reasoning in this mode, so `thinking` is dropped from every message, the reply
included, as the template and tinker-cookbook drop it. With thinking on
(`deepseekv3_thinking`), the reply after a user message opens with `<think>` (in the header, so it
is the generation prompt's last token) and its body is `{thinking}</think>{content}`."""

from __future__ import annotations

import re
from collections.abc import Sequence

from train_core.renderers.errors import RendererError
from train_core.renderers.messages import Message, ToolCall
from train_core.renderers.responses import assistant_message, split_at_stop, unparsed
from train_core.renderers.span_renderer import Span, SpanRenderer
from train_core.renderers.tokenizer import Part, Special, Tokenizer
from train_core.renderers.tool_calls import decode_arguments, encode_arguments, match_calls
from train_core.types import StopCondition

BOS = Special("<｜begin▁of▁sentence｜>")
EOS = Special("<｜end▁of▁sentence｜>")
USER = Special("<｜User｜>")
ASSISTANT = Special("<｜Assistant｜>")
THINK = Special("<think>")
END_THINK = Special("</think>")
TOOL_CALLS_BEGIN = Special("<｜tool▁calls▁begin｜>")
TOOL_CALLS_END = Special("<｜tool▁calls▁end｜>")
TOOL_CALL_BEGIN = Special("<｜tool▁call▁begin｜>")
TOOL_CALL_END = Special("<｜tool▁call▁end｜>")
TOOL_SEP = Special("<｜tool▁sep｜>")
TOOL_OUTPUT_BEGIN = Special("<｜tool▁output▁begin｜>")
TOOL_OUTPUT_END = Special("<｜tool▁output▁end｜>")
_TOOL_CALL_RE = re.compile(
    re.escape(TOOL_CALL_BEGIN.text) + r"(.*?)" + re.escape(TOOL_SEP.text) + r"(.*?)" + re.escape(TOOL_CALL_END.text),
    re.DOTALL,
)


class DeepSeekV3Renderer(SpanRenderer):
    think_delimiters = (THINK.text, END_THINK.text)

    def __init__(self, tokenizer: Tokenizer, thinking: bool = False, system_role_as_user: bool = False) -> None:
        super().__init__(tokenizer)
        self.thinking = thinking
        self.system_role_as_user = system_role_as_user

    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        spans = [Span.preamble(BOS)]
        roles = self._effective_roles(messages)
        for i, message in enumerate(messages):
            if roles[i] == "system":
                spans.append(Span.header(i, "\n\n" if i > 0 else ""))
                spans.append(Span.body(i, message["content"]))
            elif roles[i] == "user":
                spans += [Span.header(i, USER), Span.body(i, message["content"])]
            elif roles[i] == "tool":
                spans += [Span.header(i, TOOL_OUTPUT_BEGIN), Span.body(i, message["content"], TOOL_OUTPUT_END)]
            else:
                follows_user = i > 0 and roles[i - 1] == "user"
                replying = follows_user and i == len(messages) - 1 and not add_generation_prompt
                spans += self._assistant_spans(i, message, follows_user, replying)
        return spans

    def _effective_roles(self, messages: Sequence[Message]) -> list[str]:
        """Roles as the format sees them: leading system messages stay system, later ones become
        user messages when allowed; anything else not in the format is an error."""
        roles: list[str] = []
        for i, message in enumerate(messages):
            role = message["role"]
            if role == "system" and any(r != "system" for r in roles):
                if not self.system_role_as_user:
                    raise RendererError(
                        f"deepseekv3 renders system messages only at the start; message {i} is a later "
                        "system message (set system_role_as_user to render it as a user message)"
                    )
                role = "user"
            if role not in ("system", "user", "assistant", "tool"):
                raise RendererError(f"deepseekv3 has no role {role!r} (message {i})")
            roles.append(role)
        return roles

    def _assistant_spans(self, i: int, message: Message, follows_user: bool, replying: bool) -> list[Span]:
        """`replying`: this is the reply being trained, so it shows its thinking when thinking is on."""
        header: list[Part] = []
        body: list[Part] = []
        if follows_user:
            header = [ASSISTANT, THINK if self.thinking and replying else END_THINK]
        if follows_user and self.thinking and replying:
            body += [message.get("thinking", ""), END_THINK]
        body.append(message["content"])
        calls = message.get("tool_calls") or []
        if calls:
            body.append(TOOL_CALLS_BEGIN)
            for call in calls:
                body += [TOOL_CALL_BEGIN, call["name"], TOOL_SEP, encode_arguments(call["arguments"]), TOOL_CALL_END]
            body.append(TOOL_CALLS_END)
        body.append(EOS)
        return [Span.header(i, *header), Span.body(i, *body)]

    def generation_header(self, messages: Sequence[Message], role: str) -> list[Part]:
        if role == "user":
            return [USER]
        if role != "assistant":
            raise RendererError(f"deepseekv3 cannot open a message of role {role!r}")
        if not messages or self._effective_roles(messages)[-1] != "user":
            return []
        return [ASSISTANT, THINK if self.thinking else END_THINK]

    def get_stop_sequences(self) -> StopCondition:
        return [self.codec.special_id(EOS.text)]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        body, found = split_at_stop(tokens, {self.codec.special_id(EOS.text)})
        text = self.codec.decode(body)
        if not found:
            return unparsed(text)
        thinking, rest = None, text
        if END_THINK.text in text:
            thinking, _, rest = text.partition(END_THINK.text)
            thinking = thinking.removeprefix(THINK.text)
        content, _, section = rest.partition(TOOL_CALLS_BEGIN.text)
        if not section:
            return assistant_message(content, thinking), True
        calls = _parse_tool_calls(section)
        if calls is None:
            return unparsed(text)
        return assistant_message(content, thinking, calls), True


def _parse_tool_calls(section: str) -> list[ToolCall] | None:
    """The calls between `<｜tool▁calls▁begin｜>` and `<｜tool▁calls▁end｜>`; None if malformed."""
    inner, closed, _ = section.partition(TOOL_CALLS_END.text)
    calls: list[ToolCall] = []
    for name, arguments_text in (match_calls(_TOOL_CALL_RE, inner) if closed else None) or []:
        arguments = decode_arguments(arguments_text)
        if arguments is None:
            return None
        calls.append(ToolCall(name=name, arguments=arguments))
    return calls or None
