"""Comparison datasets (and the unpaired examples KTO reads, see `load_unpaired`) from local
JSON Lines files (read by `train_core.jsonl`).

One JSON object per line; blank lines are ignored. Three layouts:

* ``"comparisons"`` — kitchen's own format::

      {"prompt": "What is 2 plus 3?", "chosen": "2 plus 3 is 5.", "rejected": "2 plus 3 is 6."}

  ``prompt`` is a string (one user message) or a list of messages ``{"role": ..., "content": ...}``
  (e.g. a system message, earlier turns, then the user's question). ``chosen`` and ``rejected``
  hold the completions only: a string (one assistant message) or a list of messages. Other keys
  are ignored. Without ``prompt`` (TRL's implicit prompt), ``chosen`` and ``rejected`` are whole
  texts or conversations and the prompt is what they share: leading messages, or leading text
  up to the space before the first difference (``{"chosen": "The sky is blue.", "rejected":
  "The sky is green."}`` is prompt ``"The sky is"``, completions ``" blue."`` / ``" green."``).
* ``"hh_rlhf"`` — Anthropic HH-RLHF: ``chosen`` and ``rejected`` are whole transcripts
  ``"\\n\\nHuman: ...\\n\\nAssistant: ..."`` ending in an Assistant turn. The last Assistant turn
  is the completion; everything before it is the prompt, which both transcripts must share.
* ``"ultrafeedback"`` — UltraFeedback-binarized: ``prompt`` (string or messages) and ``chosen`` /
  ``rejected`` message lists that start with the prompt conversation and continue with the
  completion.

Every comparison is labeled ``"A"``: completion A is the chosen one, B the rejected one.

Bad data rule. A record that cannot be read — invalid JSON, a line that is not an object, a
missing or null key, a value of the wrong type — raises `DataFormatError` naming the file and
line: the file needs fixing. A readable comparison that cannot teach a preference is skipped and
counted in the `SkipReport` (per reason: the count and the first line numbers):

* ``empty_completion``: a completion with no message, or only blank ones;
* ``identical_completions``: chosen and rejected are the same messages;
* ``prompt_too_long``: (when a prompt-length function is given, with ``max_length``) the rendered
  prompt takes ``max_length`` tokens or more, so right truncation would leave no completion token;
* ``mismatched_prompts``: (hh_rlhf, ultrafeedback) chosen and rejected do not continue the same
  prompt.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from train_core.errors import DataFormatError
from train_core.jsonl import read_jsonl
from train_core.preference.types import Comparison, LabeledComparison
from train_core.renderers.base import Message
from train_core.renderers.messages import STANDARD_ROLES
from train_core.supervised import cut_messages

Layout = Literal["comparisons", "hh_rlhf", "ultrafeedback"]
SkipReason = Literal["empty_completion", "identical_completions", "prompt_too_long", "mismatched_prompts"]
PromptLengthFn = Callable[[list[Message]], int]
"""Token count of a rendered prompt (e.g. the length of the renderer's generation prompt)."""

MAX_REPORTED_LINES = 5


@dataclass
class SkipReport:
    """Which comparisons of a file were skipped, and why: counts and the first line numbers."""

    path: str
    num_records: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    first_lines: dict[str, list[int]] = field(default_factory=dict)

    def add(self, reason: SkipReason, line: int) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        lines = self.first_lines.setdefault(reason, [])
        if len(lines) < MAX_REPORTED_LINES:
            lines.append(line)

    @property
    def num_skipped(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        """One line for the run log, e.g. `skipped 3 of 700 comparisons in f.jsonl: ...`."""
        if not self.counts:
            return f"skipped 0 of {self.num_records} comparisons in {self.path}"
        parts = [
            f"{reason} {count} (lines {', '.join(map(str, self.first_lines[reason]))}"
            + (", ...)" if count > len(self.first_lines[reason]) else ")")
            for reason, count in sorted(self.counts.items())
        ]
        return f"skipped {self.num_skipped} of {self.num_records} comparisons in {self.path}: " + "; ".join(parts)


@dataclass(frozen=True)
class _Record:
    """One JSON object of the file and where it came from, for error messages."""

    path: Path
    line: int
    values: dict[str, Any]

    def error(self, detail: str) -> DataFormatError:
        return DataFormatError(self.path, self.line, detail)

    def require(self, key: str) -> Any:
        value = self.values.get(key)
        if value is None:
            raise self.error(f"missing key '{key}'")
        return value


_Parsed = tuple[list[Message], list[Message], list[Message]] | SkipReason


def load_comparisons(
    path: str | Path,
    layout: Layout,
    *,
    prompt_length: PromptLengthFn | None = None,
    max_length: int | None = None,
    records: Sequence[tuple[int, dict[str, Any]]] | None = None,
) -> tuple[list[LabeledComparison], SkipReport]:
    """Read a comparison file in `layout`; return its usable comparisons and what was skipped.

    With `max_length`, every message is cut to `char_limit(max_length)` characters before any
    tokenization, so a huge record costs memory in proportion to `max_length`. `records`: the
    (number, object) pairs when they were read elsewhere (a saved HF dataset); `path` then only
    names them in messages."""
    if prompt_length is not None and max_length is None:
        raise ValueError("prompt_length needs max_length (a prompt is too long for it)")
    if layout not in _PARSERS:
        raise ValueError(f"unknown comparison layout {layout!r}; expected one of {sorted(_PARSERS)}")
    rows = _rows(path, records)
    report = SkipReport(str(path), num_records=len(rows))
    comparisons: list[LabeledComparison] = []
    for record in rows:
        comparison = _comparison(record, layout, prompt_length, max_length)
        if isinstance(comparison, str):
            report.add(comparison, record.line)
        else:
            comparisons.append(comparison)
    return comparisons, report


@dataclass(frozen=True)
class UnpairedExample:
    """One completion of a prompt labelled desirable or not: KTO's data."""

    prompt: list[Message]
    completion: list[Message]
    desirable: bool


def load_unpaired(
    path: str | Path,
    layout: Layout,
    *,
    prompt_length: PromptLengthFn | None = None,
    max_length: int | None = None,
    records: Sequence[tuple[int, dict[str, Any]]] | None = None,
) -> tuple[list[UnpairedExample], SkipReport]:
    """Read unpaired examples; return the usable ones and what was skipped.

    A record with a `label` key is TRL's unpaired layout, `{"prompt": ..., "completion": ...,
    "label": true|false}` (prompt and completion as in the `comparisons` layout, `label` true for
    a desirable completion). Any other record is a comparison in `layout`, split into its chosen
    (desirable) and rejected (undesirable) completion, as TRL's `unpair_preference_dataset` does;
    so one file may mix both. Skips as `load_comparisons` (a comparison's reasons apply to it
    whole)."""
    if layout not in _PARSERS:
        raise ValueError(f"unknown comparison layout {layout!r}; expected one of {sorted(_PARSERS)}")
    rows = _rows(path, records)
    report = SkipReport(str(path), num_records=len(rows))
    examples: list[UnpairedExample] = []
    for record in rows:
        if "label" not in record.values:
            comparison = _comparison(record, layout, prompt_length, max_length)
            if isinstance(comparison, str):
                report.add(comparison, record.line)
                continue
            prompt, chosen, rejected = (
                comparison.comparison.prompt_conversation,
                comparison.comparison.completion_A,
                comparison.comparison.completion_B,
            )
            examples += [UnpairedExample(prompt, chosen, True), UnpairedExample(prompt, rejected, False)]
            continue
        label = record.values["label"]
        if not isinstance(label, bool):
            raise record.error(f"'label' must be true (desirable) or false (undesirable), got {label!r}")
        prompt = cut_messages(_messages(record, "prompt", record.require("prompt"), "user"), max_length)
        completion = cut_messages(
            _messages(record, "completion", record.require("completion"), "assistant"), max_length
        )
        if _is_empty(completion):
            report.add("empty_completion", record.line)
        elif prompt_length is not None and max_length is not None and prompt_length(prompt) >= max_length:
            report.add("prompt_too_long", record.line)
        else:
            examples.append(UnpairedExample(prompt, completion, label))
    return examples, report


def _rows(path: str | Path, records: Sequence[tuple[int, dict[str, Any]]] | None) -> list[_Record]:
    return _read_records(Path(path)) if records is None else [_Record(Path(path), n, v) for n, v in records]


def _comparison(
    record: _Record, layout: Layout, prompt_length: PromptLengthFn | None, max_length: int | None
) -> LabeledComparison | SkipReason:
    """One record as a comparison in `layout`, each message cut for `max_length`, or why it is skipped."""
    parsed = _PARSERS[layout](record)
    if isinstance(parsed, str):
        return parsed
    prompt, chosen, rejected = (cut_messages(messages, max_length) for messages in parsed)
    reason = _skip_reason(prompt, chosen, rejected, prompt_length, max_length)
    if reason is not None:
        return reason
    return LabeledComparison(Comparison(prompt, chosen, rejected), "A")


def _skip_reason(
    prompt: list[Message],
    chosen: list[Message],
    rejected: list[Message],
    prompt_length: PromptLengthFn | None,
    max_length: int | None,
) -> SkipReason | None:
    if _is_empty(chosen) or _is_empty(rejected):
        return "empty_completion"
    if chosen == rejected:
        return "identical_completions"
    if prompt_length is not None and max_length is not None and prompt_length(prompt) >= max_length:
        return "prompt_too_long"
    return None


def _is_empty(completion: list[Message]) -> bool:
    return all(not message["content"].strip() for message in completion)


def _read_records(path: Path) -> list[_Record]:
    """The file's JSON objects, each with its 1-based line number."""
    return [_Record(path, number, values) for number, values in read_jsonl(path)]


def _messages(record: _Record, key: str, value: Any, default_role: str) -> list[Message]:
    """A string (one message in `default_role`) or a list of {role, content} messages."""
    if isinstance(value, str):
        return [Message(role=default_role, content=value)]
    if not isinstance(value, list):
        raise record.error(f"'{key}' must be a string or a list of messages, got {type(value).__name__}")
    messages = []
    for index, item in enumerate(value):
        where = f"'{key}'[{index}]"
        if not isinstance(item, dict):
            raise record.error(f"{where} must be an object with 'role' and 'content', got {type(item).__name__}")
        role, content = item.get("role"), item.get("content")
        if not isinstance(role, str) or not role:
            raise record.error(f"{where} needs a non-empty string 'role'")
        if role not in STANDARD_ROLES:
            raise record.error(f"{where} has unknown role {role!r}; supported: {sorted(STANDARD_ROLES)}")
        if not isinstance(content, str):
            raise record.error(f"{where} 'content' must be a string, got {type(content).__name__}")
        messages.append(Message(role=role, content=content))
    return messages


def _parse_comparisons(record: _Record) -> _Parsed:
    if record.values.get("prompt") is None and "chosen" in record.values and "rejected" in record.values:
        return _implicit_prompt(record)
    prompt = _messages(record, "prompt", record.require("prompt"), "user")
    chosen = _messages(record, "chosen", record.require("chosen"), "assistant")
    rejected = _messages(record, "rejected", record.require("rejected"), "assistant")
    return prompt, chosen, rejected


def _implicit_prompt(record: _Record) -> _Parsed:
    """TRL's implicit-prompt preference record: no `prompt`; `chosen` and `rejected` are whole
    texts or conversations, and the prompt is what they share. Conversations share leading
    messages; texts share leading characters, up to (not including) the space before the first
    difference, so each completion starts with its space (" blue." / " green.")."""
    chosen, rejected = record.require("chosen"), record.require("rejected")
    if isinstance(chosen, str) and isinstance(rejected, str):
        shared = _shared_prefix(chosen, rejected)
        if 0 < shared < min(len(chosen), len(rejected)) and chosen[shared - 1] == " ":
            shared -= 1
        if shared == 0:
            return "mismatched_prompts"
        return (
            [Message(role="user", content=chosen[:shared])],
            [Message(role="assistant", content=chosen[shared:])],
            [Message(role="assistant", content=rejected[shared:])],
        )
    if not (isinstance(chosen, list) and isinstance(rejected, list)):
        raise record.error(
            "without a 'prompt', 'chosen' and 'rejected' must both be texts or both be lists of messages "
            "(an implicit-prompt comparison)"
        )
    chosen_messages = _messages(record, "chosen", chosen, "assistant")
    rejected_messages = _messages(record, "rejected", rejected, "assistant")
    shared = _shared_prefix(chosen_messages, rejected_messages)
    if shared == 0:
        return "mismatched_prompts"
    return chosen_messages[:shared], chosen_messages[shared:], rejected_messages[shared:]


def _shared_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items (characters, messages) `a` and `b` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


_HH_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant):")
_HH_ROLES = {"Human": "user", "Assistant": "assistant"}


def _hh_transcript(record: _Record, key: str) -> list[Message]:
    text = record.require(key)
    if not isinstance(text, str):
        raise record.error(f"'{key}' must be a transcript string, got {type(text).__name__}")
    pieces = _HH_TURN.split(text)
    if pieces[0].strip() or len(pieces) == 1:
        raise record.error(f"'{key}' must be turns starting with '\\n\\nHuman:' or '\\n\\nAssistant:'")
    messages = [
        Message(role=_HH_ROLES[speaker], content=content.strip())
        for speaker, content in zip(pieces[1::2], pieces[2::2], strict=True)
    ]
    if messages[-1]["role"] != "assistant":
        raise record.error(f"'{key}' must end with an Assistant turn")
    return messages


def _parse_hh_rlhf(record: _Record) -> _Parsed:
    chosen = _hh_transcript(record, "chosen")
    rejected = _hh_transcript(record, "rejected")
    if chosen[:-1] != rejected[:-1]:
        return "mismatched_prompts"
    return chosen[:-1], chosen[-1:], rejected[-1:]


def _parse_ultrafeedback(record: _Record) -> _Parsed:
    prompt = _messages(record, "prompt", record.require("prompt"), "user")
    for key in ("chosen", "rejected"):
        if not isinstance(record.require(key), list):
            raise record.error(f"'{key}' must be a list of messages (the prompt conversation, then the completion)")
    chosen = _messages(record, "chosen", record.values["chosen"], "assistant")
    rejected = _messages(record, "rejected", record.values["rejected"], "assistant")
    n = len(prompt)
    if chosen[:n] != prompt or rejected[:n] != prompt:
        return "mismatched_prompts"
    return prompt, chosen[n:], rejected[n:]


_PARSERS: dict[str, Callable[[_Record], _Parsed]] = {
    "comparisons": _parse_comparisons,
    "hh_rlhf": _parse_hh_rlhf,
    "ultrafeedback": _parse_ultrafeedback,
}
