"""The models' published chat templates (`chat_templates/`, sources in `chat_templates/SOURCES.md`)
rendered as Hugging Face's `apply_chat_template` renders them, which template (and options) each
renderer is checked against, and every deliberate difference from it, named, with its reason.

The environment is tokenizer-free and set up as transformers sets up its own: sandboxed,
`trim_blocks`, `lstrip_blocks`, loop controls, `raise_exception`, `strftime_now` and a `tojson`
that is `json.dumps` (non-ASCII kept)."""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment
from PIL import Image
from renderer_cases import CAPABILITIES, GPT_OSS_DATE

from train_core.renderers import Message, ToolCall, get_renderer
from train_core.renderers.base import Renderer
from train_core.renderers.gpt_oss import GptOssRenderer, system_prompt
from train_core.renderers.hf_chat_template import _to_hf
from train_core.renderers.nemotron3 import EFFORT_SUFFIXES
from train_core.renderers.registry import renderer_takes_images
from train_core.renderers.tokenizer import Tokenizer

TEMPLATES = Path(__file__).parent / "chat_templates"


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    """The gpt-oss template writes today's date; the renderers under test are given this one."""
    return datetime.date.fromisoformat(GPT_OSS_DATE).strftime(fmt)


def make_renderer(name: str, tokenizer: Tokenizer) -> Renderer:
    renderer = get_renderer(name, tokenizer)
    if isinstance(renderer, GptOssRenderer):
        renderer.current_date = GPT_OSS_DATE
    return renderer


@functools.cache
def template(file: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    return env.from_string((TEMPLATES / file).read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Rendering:
    """What is rendered: a conversation, as a generation prompt or as a supervised example."""

    messages: Sequence[Message]
    add_generation_prompt: bool

    @property
    def reply(self) -> Message | None:
        """The message a supervised example trains (its last), None for a prompt."""
        return None if self.add_generation_prompt or not self.messages else self.messages[-1]


@dataclass(frozen=True)
class Difference:
    """A deliberate difference between a renderer and its model's template, on the renderings it
    `applies` to: the conversation given to the template changed first (`before`), then the
    template's text rewritten into the renderer's (`rewrite`, which sees the original rendering).
    With neither, the renderer refuses such a rendering (a RendererError)."""

    name: str
    reason: str
    applies: Callable[[Rendering], bool] = lambda rendering: True
    rewrite: Callable[[str, Rendering, TemplateCheck], str] | None = None
    before: Callable[[Rendering], Rendering] | None = None

    @property
    def refusal(self) -> bool:
        return self.rewrite is None and self.before is None


@dataclass(frozen=True)
class TemplateCheck:
    """How a renderer is compared with its model's template: the file, the template's own options
    (`enable_thinking`, reasoning effort, ...), how a message is passed to it and the differences."""

    file: str
    options: dict[str, Any] = field(default_factory=dict)
    differences: tuple[Difference, ...] = ()
    to_template: Callable[[Message], dict[str, Any]] = _to_hf

    def render(self, rendering: Rendering) -> str:
        messages = [self.to_template(m) for m in rendering.messages]
        return template(self.file).render(
            messages=messages, add_generation_prompt=rendering.add_generation_prompt, **self.options
        )

    def expected(self, rendering: Rendering) -> str | list[str]:
        """The renderer's text for `rendering`: the template's with the differences that apply, or
        the names of the reasons it must refuse it (a named refusal, or the template raising)."""
        applying = [d for d in self.differences if d.applies(rendering)]
        refusals = [d.name for d in applying if d.refusal]
        if refusals:
            return refusals
        given = rendering
        for difference in applying:
            given = difference.before(given) if difference.before else given
        try:
            text = self.render(given)
        except jinja2.TemplateError as error:
            return [f"the template raises: {error}"]
        for difference in applying:
            text = difference.rewrite(text, rendering, self) if difference.rewrite else text
        return text


# -- differences shared by families --------------------------------------------------------------

NEXT_HEADER_NEWLINE = Difference(
    "next_header_newline",
    "the newline the template writes after a supervised example's last end-of-message token opens the "
    "next message: the renderer writes it with that message's header, so a conversation's tokens are a "
    "prefix of its continuation's",
    lambda r: not r.add_generation_prompt,
    lambda text, r, check: text.removesuffix("\n"),
)


LLAMA3_DATE_LINES = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
LLAMA3_EMPTY_SYSTEM = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n<|eot_id|>"


def _without_date_preamble(text: str, rendering: Rendering, check: TemplateCheck) -> str:
    assert LLAMA3_DATE_LINES in text, "the template no longer writes the date preamble"
    text = text.replace(LLAMA3_DATE_LINES, "", 1)
    if not rendering.messages or rendering.messages[0]["role"] != "system":
        text = "<|begin_of_text|>" + text.removeprefix(LLAMA3_EMPTY_SYSTEM)
    return text


NO_DATE_PREAMBLE = Difference(
    "no_date_preamble",
    "the Llama 3.1+ template opens every conversation with a system block stating 'Cutting Knowledge "
    "Date: December 2023' and a fixed 'Today Date: 26 Jul 2024'; the renderer writes neither (as "
    "tinker-cookbook's llama3 and the Llama 3 template): a system block only for a system message",
    rewrite=_without_date_preamble,
)


def replace_in_order(text: str, replacements: Sequence[tuple[str, str]]) -> str:
    """Each (old, new) replaced at its first occurrence after the previous one, in order."""
    done, at = "", 0
    for old, new in replacements:
        found = text.find(old, at)
        assert found >= 0, f"the template no longer writes {old!r}"
        done, text, at = done + text[:found] + new, text[found + len(old) :], 0
    return done + text


def _raw_tool_results(header: str, end: str) -> Callable[[str, Rendering, TemplateCheck], str]:
    def rewrite(text: str, rendering: Rendering, check: TemplateCheck) -> str:
        results = [m["content"] for m in rendering.messages if m["role"] == "tool"]
        return replace_in_order(
            text, [(header + json.dumps(c, ensure_ascii=False) + end, header + c + end) for c in results]
        )

    return rewrite


LLAMA3_TOOL_RESULT_RAW = Difference(
    "tool_result_not_json_quoted",
    "the Llama 3.1 template JSON-quotes a tool result given as a string (Jinja's `iterable` test is true "
    "for strings); Meta's prompt format writes the tool's output as is, as the renderer does",
    lambda r: any(m["role"] == "tool" for m in r.messages),
    _raw_tool_results("<|start_header_id|>ipython<|end_header_id|>\n\n", "<|eot_id|>"),
)


LLAMA3_REASONING_REFUSED = Difference(
    "reasoning_refused",
    "Llama 3 has no reasoning format: the template silently drops a message's reasoning, the renderer "
    "refuses it rather than train on a conversation without it",
    lambda r: any(m.get("thinking") for m in r.messages),
)


def later_system_refused(reason: str, applies: Callable[[Rendering], bool]) -> Difference:
    return Difference("later_system_refused", reason, applies)


def _system_after(rendering: Rendering) -> bool:
    """A system message after one that is not a system message."""
    roles = [m["role"] for m in rendering.messages]
    return any(role == "system" and any(r != "system" for r in roles[:i]) for i, role in enumerate(roles))


QWEN3_VL_LATER_SYSTEM = later_system_refused(
    "the template silently drops a system message that is not the first; the renderer refuses it rather "
    "than train on a conversation the model would be shown without it",
    lambda r: any(m["role"] == "system" for m in r.messages[1:]),
)
GPT_OSS_LATER_SYSTEM = later_system_refused(
    "the template makes the first message, if a system message, the developer message and silently drops "
    "any later system message; the renderer refuses one rather than train on a conversation the model "
    "would be shown without it",
    lambda r: any(m["role"] == "system" for m in r.messages[1:]),
)
DEEPSEEK_LATER_SYSTEM = later_system_refused(
    "the template moves a system message that follows the conversation's start to the front, joined to "
    "the leading ones; the renderer refuses to reorder the conversation (`system_role_as_user` renders it "
    "as a user message instead)",
    _system_after,
)


def _deepseek_reply_reasoning(text: str, rendering: Rendering, check: TemplateCheck) -> str:
    reply = rendering.reply or Message(role="assistant", content="")
    opened = f"<｜Assistant｜><think>{reply.get('thinking', '')}</think>"
    return _replace_last("<｜Assistant｜></think>", opened)(text, rendering, check)


DEEPSEEK_REPLY_REASONING = Difference(
    "reply_reasoning_written",
    "with thinking on, the template only opens `<think>` in the generation prompt and writes a reply after a "
    "user message as `</think>{content}`, reasoning dropped; the renderer writes the reply being trained as "
    "it is sampled after that prompt, `<think>{thinking}</think>{content}`, so the prompt is its prefix",
    lambda r: r.reply is not None and len(r.messages) > 1 and r.messages[-2]["role"] == "user",
    _deepseek_reply_reasoning,
)


def _replying_with_reasoning(strip: bool = False) -> Callable[[Rendering], bool]:
    def applies(rendering: Rendering) -> bool:
        reply = rendering.reply
        thinking = reply.get("thinking", "") if reply else ""
        return bool(thinking.strip() if strip else thinking) and any(m["role"] == "user" for m in rendering.messages)

    return applies


def trained_reasoning_refused(strip: bool = False) -> Difference:
    return Difference(
        "trained_reasoning_refused",
        "with thinking off the generation prompt closes the think block, so reasoning on the reply being "
        "trained, which the template writes after that prompt (Qwen, Nemotron) or silently drops (Kimi), "
        "belongs to another conversation than the one given: the renderer refuses it (earlier messages' "
        "reasoning is dropped where the template drops it)",
        _replying_with_reasoning(strip),
    )


def _no_prefix(prefix: str) -> Callable[[str, Rendering, TemplateCheck], str]:
    def rewrite(text: str, rendering: Rendering, check: TemplateCheck) -> str:
        assert text.startswith(prefix), f"the template no longer starts with {prefix!r}"
        return text.removeprefix(prefix)

    return rewrite


def _replace_last(old: str, new: str) -> Callable[[str, Rendering, TemplateCheck], str]:
    def rewrite(text: str, rendering: Rendering, check: TemplateCheck) -> str:
        head, found, tail = text.rpartition(old)
        assert found, f"the template no longer writes {old!r}"
        return head + new + tail

    return rewrite


# -- differences of one family -------------------------------------------------------------------


def _prompt(check: TemplateCheck, history: Sequence[Message]) -> str:
    """The renderer's generation prompt for `history`, as the check expects it."""
    prompt = check.expected(Rendering(history, add_generation_prompt=True))
    assert isinstance(prompt, str), f"the generation prompt is refused: {prompt}"
    return prompt


KIMI_ASSISTANT_HEADER = "<|im_assistant|>assistant<|im_middle|>"


def _kimi_reply_as_current(text: str, rendering: Rendering, check: TemplateCheck) -> str:
    """The generation prompt before the reply, as the template writes it, then the reply as the
    template writes a message after the last answer: `<think>{reasoning}</think>{content}<|im_end|>`
    (a reply ending a supervised example has no tool calls where this applies)."""
    *history, reply = rendering.messages
    prompt = _prompt(check, history)
    opening = prompt.rpartition(KIMI_ASSISTANT_HEADER)[2]
    reasoning = reply.get("thinking", "") if check.options.get("thinking", True) else ""
    return prompt + f"<think>{reasoning}</think>{reply['content']}<|im_end|>".removeprefix(opening)


def _with_call_ids(rendering: Rendering) -> Rendering:
    messages = []
    for message in rendering.messages:
        if calls := message.get("tool_calls"):
            calls = [ToolCall(**{"id": f"functions.{c['name']}:{j}", **c}) for j, c in enumerate(calls)]
            message = Message(**{**message, "tool_calls": calls})
        messages.append(message)
    return Rendering(messages, rendering.add_generation_prompt)


KIMI_CALL_IDS = Difference(
    "call_id_filled",
    "the template writes each call's `id` as given, and nothing for a call without one; the renderer writes "
    "Kimi's own id, `functions.{name}:{index}`, for a call given none, as the model's calls always carry one",
    lambda r: any(not c.get("id") for m in r.messages for c in m.get("tool_calls") or []),
    before=_with_call_ids,
)

KIMI_REPLY_NOT_HISTORY = Difference(
    "reply_not_history",
    "the template counts every message up to the last assistant message without tool calls as history "
    "(reasoning emptied to `<think></think>`), so in a supervised example the reply and the tool steps "
    "of its turn lose their reasoning; the renderer leaves the reply out of that search, so they are "
    "written as after the generation prompt, reasoning kept: what the model writes is what it is trained on",
    lambda r: r.reply is not None and r.reply["role"] == "assistant" and not r.reply.get("tool_calls"),
    _kimi_reply_as_current,
)


def _without_gpt_oss_system(text: str, rendering: Rendering, check: TemplateCheck) -> str:
    system = f"<|start|>system<|message|>{system_prompt('medium', GPT_OSS_DATE)}<|end|>"
    return _no_prefix(system)(text, rendering, check)


GPT_OSS_NO_SYSTEM_PROMPT = Difference(
    "no_system_prompt",
    "`gpt_oss_no_sysprompt` leaves out the system message (model identity, date, reasoning effort) the "
    "template always writes, as tinker-cookbook's renderer of that name does",
    rewrite=_without_gpt_oss_system,
)

GPT_OSS_CONSTRAIN = Difference(
    "constrain_token",
    "a tool call's channel is `commentary <|constrain|>json` in the harmony format the model writes (OpenAI's "
    "harmony renderer, tinker-cookbook); the Hugging Face template writes `commentary json` without the token",
    lambda r: any(m.get("tool_calls") for m in r.messages),
    lambda text, r, check: text.replace(
        "<|channel|>commentary json<|message|>", "<|channel|>commentary <|constrain|>json<|message|>"
    ),
)


def _gpt_oss_raw_results(text: str, rendering: Rendering, check: TemplateCheck) -> str:
    replacements = []
    for message in rendering.messages:
        if message["role"] == "tool":
            header = f"<|start|>functions.{message.get('name')} to=assistant<|channel|>commentary<|message|>"
            quoted = json.dumps(message["content"], ensure_ascii=False)
            replacements.append((header + quoted + "<|end|>", header + message["content"] + "<|end|>"))
    return replace_in_order(text, replacements)


GPT_OSS_RAW_RESULTS = Difference(
    "tool_result_not_json_quoted",
    "the Hugging Face template JSON-quotes every tool result (`content|tojson`); in the harmony format a "
    "tool's message is its output as is (OpenAI's harmony renderer, tinker-cookbook), as the renderer writes it",
    lambda r: any(m["role"] == "tool" for m in r.messages),
    _gpt_oss_raw_results,
)


def _calls_with_text(rendering: Rendering) -> bool:
    return any(m.get("tool_calls") and m["content"] for m in rendering.messages)


def _without_call_text(rendering: Rendering) -> Rendering:
    messages = [Message(**{**m, "content": ""}) if m.get("tool_calls") else m for m in rendering.messages]
    return Rendering(messages, rendering.add_generation_prompt)


def _call_text_as_commentary(text: str, rendering: Rendering, check: TemplateCheck) -> str:
    replacements = []
    for message in rendering.messages:
        if calls := message.get("tool_calls"):
            call = f"<|start|>assistant to=functions.{calls[0]['name']}"
            preamble = f"<|start|>assistant<|channel|>commentary<|message|>{message['content']}<|end|>"
            replacements.append((call, (preamble if message["content"] else "") + call))
    return replace_in_order(text, replacements)


GPT_OSS_CALL_PREAMBLE = Difference(
    "call_text_as_preamble",
    "the template writes the text of a message that calls a tool on the analysis channel, as reasoning (and "
    "raises when the message also has reasoning); in harmony, text the model shows before a call is a "
    "preamble on the commentary channel (OpenAI's harmony format, tinker-cookbook), so the renderer writes "
    "reasoning on analysis and the text on commentary, each as given",
    _calls_with_text,
    _call_text_as_commentary,
    _without_call_text,
)


def _gpt_oss_reply_after_prompt(text: str, rendering: Rendering, check: TemplateCheck) -> str:
    """The generation prompt before the reply, then the reply's analysis and final messages as the
    template writes them at the end of the conversation."""
    final = text.rindex("<|start|>assistant<|channel|>final<|message|>")
    analysis = text.rfind("<|start|>assistant<|channel|>analysis<|message|>", 0, final)
    start = analysis if rendering.reply and rendering.reply.get("thinking") else final
    return _prompt(check, rendering.messages[:-1]) + text[start:].removeprefix("<|start|>assistant")


GPT_OSS_REPLY_NOT_LATER = Difference(
    "reply_not_history",
    "the template drops a tool call's reasoning once a later final answer exists, and in a supervised example "
    "the reply being trained is one, so its turn's tool steps lose their reasoning; the renderer does not "
    "count the reply, as in generation, so the example extends the generation prompt it was sampled from",
    lambda r: (
        r.reply is not None
        and not r.reply.get("tool_calls")
        and any(m.get("tool_calls") and m.get("thinking") for m in r.messages)
    ),
    _gpt_oss_reply_after_prompt,
)
GPT_OSS = (
    GPT_OSS_CALL_PREAMBLE,
    GPT_OSS_LATER_SYSTEM,
    GPT_OSS_CONSTRAIN,
    GPT_OSS_RAW_RESULTS,
    GPT_OSS_REPLY_NOT_LATER,  # last: it builds on the prompt as the others leave it
)


def _low_effort_suffix(text: str, rendering: Rendering, check: TemplateCheck) -> str:
    """`\\n\\n{reasoning effort: low}` after the last user message's text."""
    last_user = max(i for i, m in enumerate(rendering.messages) if m["role"] == "user")
    users = [m for m in rendering.messages[: last_user + 1] if m["role"] == "user"]
    body = f"<|im_start|>user\n{users[-1]['content']}<|im_end|>"
    replacements = [(f"<|im_start|>user\n{m['content']}<|im_end|>",) * 2 for m in users[:-1]]
    suffixed = f"<|im_start|>user\n{users[-1]['content']}{EFFORT_SUFFIXES['low']}<|im_end|>"
    return replace_in_order(text, [*replacements, (body, suffixed)])


SUPER_LOW_EFFORT = Difference(
    "super_low_effort_suffix",
    "checked against the Nano template, since Nemotron-3 Super's is not public but for excerpts: with "
    "`low_effort` Super's template appends `\\n\\n{reasoning effort: low}` to the last user message, which "
    "is all `nemotron3_low_thinking` adds to the Nano format",
    lambda r: any(m["role"] == "user" for m in r.messages),
    _low_effort_suffix,
)

DEEPSEEK_OPTIONS = {"bos_token": "<｜begin▁of▁sentence｜>"}


def json_arguments(message: Message) -> dict[str, Any]:
    """As `_to_hf`, with each call's arguments as JSON text (OpenAI's wire form), which DeepSeek V3.1's
    template concatenates as is."""
    converted = _to_hf(message)
    for call in converted.get("tool_calls", []):
        call["function"]["arguments"] = json.dumps(call["function"]["arguments"], ensure_ascii=False)
    return converted


# -- the checks ----------------------------------------------------------------------------------

CHECKS: dict[str, TemplateCheck] = {
    "qwen3": TemplateCheck("qwen3.jinja", differences=(NEXT_HEADER_NEWLINE,)),
    "qwen3_disable_thinking": TemplateCheck(
        "qwen3.jinja", {"enable_thinking": False}, differences=(NEXT_HEADER_NEWLINE, trained_reasoning_refused())
    ),
    "qwen3_5": TemplateCheck("qwen3_6.jinja", differences=(NEXT_HEADER_NEWLINE,)),
    "qwen3_5_disable_thinking": TemplateCheck(
        "qwen3_6.jinja", {"enable_thinking": False}, differences=(NEXT_HEADER_NEWLINE, trained_reasoning_refused())
    ),
    "qwen3_5_preserve_thinking": TemplateCheck(
        "qwen3_6.jinja", {"preserve_thinking": True}, differences=(NEXT_HEADER_NEWLINE,)
    ),
    "qwen3_8_xhigh_reasoning": TemplateCheck("qwen3_8.jinja", differences=(NEXT_HEADER_NEWLINE,)),
    "qwen3_8_medium_reasoning": TemplateCheck(
        "qwen3_8.jinja", {"reasoning_effort": "medium"}, differences=(NEXT_HEADER_NEWLINE,)
    ),
    "qwen3_8_low_reasoning": TemplateCheck(
        "qwen3_8.jinja", {"reasoning_effort": "low"}, differences=(NEXT_HEADER_NEWLINE,)
    ),
    "qwen3_8_disable_thinking": TemplateCheck(
        "qwen3_8.jinja", {"enable_thinking": False}, differences=(NEXT_HEADER_NEWLINE, trained_reasoning_refused())
    ),
    "qwen3_vl": TemplateCheck("qwen3_vl_thinking.jinja", differences=(NEXT_HEADER_NEWLINE,)),
    "qwen3_vl_instruct": TemplateCheck(
        "qwen3_vl_instruct.jinja", differences=(NEXT_HEADER_NEWLINE, QWEN3_VL_LATER_SYSTEM)
    ),
    "llama3": TemplateCheck(
        "llama3_1.jinja",
        {"bos_token": "<|begin_of_text|>"},
        (NO_DATE_PREAMBLE, LLAMA3_TOOL_RESULT_RAW, LLAMA3_REASONING_REFUSED),
    ),
    "deepseekv3": TemplateCheck("deepseek_v3_1.jinja", DEEPSEEK_OPTIONS, (DEEPSEEK_LATER_SYSTEM,), json_arguments),
    "deepseekv3_disable_thinking": TemplateCheck(
        "deepseek_v3_1.jinja", DEEPSEEK_OPTIONS, (DEEPSEEK_LATER_SYSTEM,), json_arguments
    ),
    "deepseekv3_thinking": TemplateCheck(
        "deepseek_v3_1.jinja",
        {**DEEPSEEK_OPTIONS, "thinking": True},
        (DEEPSEEK_LATER_SYSTEM, DEEPSEEK_REPLY_REASONING),
        json_arguments,
    ),
    "kimi_k2": TemplateCheck("kimi_k2_thinking.jinja", differences=(KIMI_CALL_IDS, KIMI_REPLY_NOT_HISTORY)),
    **{
        name: TemplateCheck("kimi_k2_5.jinja", differences=(KIMI_CALL_IDS, KIMI_REPLY_NOT_HISTORY))
        for name in ("kimi_k25", "kimi_k26")
    },
    **{
        name: TemplateCheck(
            "kimi_k2_5.jinja",
            {"thinking": False},
            (KIMI_CALL_IDS, KIMI_REPLY_NOT_HISTORY, trained_reasoning_refused()),
        )
        for name in ("kimi_k25_disable_thinking", "kimi_k26_disable_thinking")
    },
    **{
        f"gpt_oss_{effort}_reasoning": TemplateCheck("gpt_oss.jinja", {"reasoning_effort": effort}, GPT_OSS)
        for effort in ("low", "medium", "high")
    },
    "gpt_oss_no_sysprompt": TemplateCheck("gpt_oss.jinja", differences=(GPT_OSS_NO_SYSTEM_PROMPT, *GPT_OSS)),
    "nemotron3": TemplateCheck("nemotron3_nano.jinja", differences=(NEXT_HEADER_NEWLINE,)),
    "nemotron3_disable_thinking": TemplateCheck(
        "nemotron3_nano.jinja",
        {"enable_thinking": False},
        (NEXT_HEADER_NEWLINE, trained_reasoning_refused(strip=True)),
    ),
    "nemotron3_preserve_thinking": TemplateCheck(
        "nemotron3_nano.jinja", {"truncate_history_thinking": False}, differences=(NEXT_HEADER_NEWLINE,)
    ),
    "nemotron3_low_thinking": TemplateCheck(
        "nemotron3_nano.jinja", differences=(NEXT_HEADER_NEWLINE, SUPER_LOW_EFFORT)
    ),
    "nemotron3_ultra": TemplateCheck("nemotron3_5.jinja", differences=(NEXT_HEADER_NEWLINE,)),
    "nemotron3_ultra_disable_thinking": TemplateCheck(
        "nemotron3_5.jinja",
        {"enable_thinking": False},
        (NEXT_HEADER_NEWLINE, trained_reasoning_refused(strip=True)),
    ),
    "nemotron3_ultra_medium_thinking": TemplateCheck(
        "nemotron3_5.jinja", {"medium_effort": True}, differences=(NEXT_HEADER_NEWLINE,)
    ),
    "nemotron3_ultra_preserve_thinking": TemplateCheck(
        "nemotron3_5.jinja", {"truncate_history_thinking": False}, differences=(NEXT_HEADER_NEWLINE,)
    ),
}
"""Every renderer with a published template to check against (the others: `SOURCES.md`)."""


def differences() -> dict[str, set[str]]:
    """Each named difference and the renderers it is a difference of."""
    named: dict[str, set[str]] = {}
    for renderer, check in CHECKS.items():
        for difference in check.differences:
            named.setdefault(difference.name, set()).add(renderer)
    return named


# -- generated conversations ---------------------------------------------------------------------

_ALPHABET = "ab yz.,?!'\"é漢🙂\n\t"
"""Text with leading, trailing and inner whitespace, quotes and non-ASCII (no markup characters:
a message holding the format's own tags is another question)."""
_texts = st.text(_ALPHABET, max_size=8)
_words = st.text("abyzé漢 ", min_size=1, max_size=6).map(str.strip).filter(bool)
_scalars = st.one_of(_texts, st.integers(-5, 99), st.booleans(), st.none(), st.sampled_from([0.5, -2.25]))
_values = st.one_of(_scalars, st.lists(_scalars, max_size=2), st.dictionaries(_words, _scalars, max_size=2))
_arguments = st.dictionaries(st.sampled_from(["city", "unit", "days", "q"]), _values, max_size=3)


@dataclass(frozen=True)
class Shape:
    """What a renderer's conversations may hold: tool calls ("many", "one" per message, "one_alone"
    without text beside it, or "none"), reasoning on assistant messages, and images."""

    tool_calls: str
    thinking: bool
    images: bool = False


def shape(name: str) -> Shape:
    caps = CAPABILITIES[name] if name in CAPABILITIES else CAPABILITIES[name.replace("_vl", "")]
    return Shape(
        caps.tool_calls,
        caps.thinking != "rejected" or caps.history_thinking,
        renderer_takes_images(name),
    )


@st.composite
def conversations(draw: st.DrawFn, form: Shape) -> list[Message]:
    """Leading system messages (none, one, or now and then two), then one to three user turns, now
    and then after a later system message (several families refuse those, so they are kept rare),
    with up to two rounds of tool calls (with call ids, or sometimes none) and results before the
    turn's answer; every assistant message may reason, any text may be empty."""
    leading = draw(st.sampled_from([0, 0, 1, 1, 1, 2]))
    messages = [Message(role="system", content=draw(_texts)) for _ in range(leading)]
    calls_made = 0
    for turn in range(draw(st.integers(1, 3))):
        if turn and draw(st.integers(0, 9)) == 0:
            messages.append(Message(role="system", content=draw(_texts)))
        messages.append(Message(role="user", content=draw(_user_content(form))))
        rounds = draw(st.integers(0, 2)) if form.tool_calls != "none" else 0
        for _ in range(rounds):
            count = draw(st.integers(1, 2)) if form.tool_calls == "many" else 1
            calls = [
                ToolCall(name=draw(st.sampled_from(["get_weather", "search"])), arguments=draw(_arguments))
                for _ in range(count)
            ]
            with_ids = draw(st.integers(0, 3)) > 0
            ids = [f"functions.{call['name']}:{calls_made + j if with_ids else j}" for j, call in enumerate(calls)]
            if with_ids:
                for call, call_id in zip(calls, ids, strict=True):
                    call["id"] = call_id
            calls_made += count
            step = draw(_assistant(form))
            step["tool_calls"] = calls
            if form.tool_calls == "one_alone":
                step["content"] = ""
            messages.append(step)
            messages += [
                Message(role="tool", content=draw(_texts), name=call["name"], tool_call_id=call_id)
                for call, call_id in zip(calls, ids, strict=True)
            ]
        messages.append(draw(_assistant(form)))
    return messages


@st.composite
def _assistant(draw: st.DrawFn, form: Shape) -> Message:
    message = Message(role="assistant", content=draw(_texts))
    if form.thinking and draw(st.booleans()):
        message["thinking"] = draw(_texts)
    return message


@st.composite
def _user_content(draw: st.DrawFn, form: Shape) -> Any:
    if not form.images or draw(st.booleans()):
        return draw(_texts)
    parts: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            parts.append({"type": "image", "image": PICTURE})
        else:
            parts.append({"type": "text", "text": draw(_texts)})
    return parts


PICTURE = Image.new("RGB", (40, 30), "red")
