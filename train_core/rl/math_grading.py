"""Grading math answers: find the model's final answer, normalise it, compare with a reference.

A final answer is the last `\\boxed{...}` if there is one, else the last number in the text.
Normalisation makes equal numbers compare equal across spellings (`1,000` / `1000.0`,
`\\frac{1}{2}` / `0.5`, `$5` / `5`), and otherwise compares the cleaned-up strings.
"""

from __future__ import annotations

import re
from fractions import Fraction

from train_core.errors import InvalidInputError

_BOX_COMMANDS = ("\\boxed{", "\\fbox{")
# A sign counts only where it cannot be a binary minus/plus ("5-6" is 5 and 6, not 5 and -6).
_NUMBER = re.compile(r"(?:(?<![\w)])[-+])?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\{([^{}]*)\}")
_FRAC = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")
_FRAC_SHORT = re.compile(r"\\[dt]?frac(\d)(\d)")
_THOUSANDS = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_VARIABLE_PREFIX = re.compile(r"^[a-z]\s*=\s*")
_DROPPED = (
    "\\left",
    "\\right",
    "\\!",
    "\\,",
    "\\;",
    "\\ ",
    "^{\\circ}",
    "^\\circ",
    "°",
    "\\%",
    "%",
    "\\$",
    "$",
)


class AnswerParseError(InvalidInputError):
    """A reference answer in a data file that cannot be read; the message names file and line."""


def extract_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None if absent."""
    position, command = max((text.rfind(cmd), cmd) for cmd in _BOX_COMMANDS)
    if position < 0:
        return None
    start = position + len(command)
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def extract_last_number(text: str) -> str | None:
    """The last number written in the text (sign, thousands commas and decimals kept), or None."""
    matches = _NUMBER.findall(text)
    return matches[-1] if matches else None


def extract_answer(text: str) -> str | None:
    """The final answer: the last boxed expression, else the last number."""
    boxed = extract_boxed(text)
    return boxed if boxed is not None else extract_last_number(text)


def normalize_answer(answer: str) -> str:
    """A canonical spelling: LaTeX noise, units like `$`/`%`/degrees and spaces removed; a number
    becomes its exact reduced fraction (`2.50` -> `5/2`, `1,000` -> `1000`)."""
    s = answer.strip()
    for token in _DROPPED:
        s = s.replace(token, "")
    s = _TEXT_WRAPPER.sub(r"\1", s)
    s = _FRAC.sub(r"(\1)/(\2)", s)
    s = _FRAC_SHORT.sub(r"\1/\2", s)
    s = "".join(s.split()).lower().rstrip(".")
    while s.startswith("{") and s.endswith("}"):
        s = s[1:-1]
    s = _VARIABLE_PREFIX.sub("", s)
    s = re.sub(r"\((-?[\d.]+)\)", r"\1", s)
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    try:
        return str(Fraction(s))
    except (ValueError, ZeroDivisionError):
        return s


def answers_match(given: str, reference: str) -> bool:
    """Whether two answers are the same after normalisation."""
    return normalize_answer(given) == normalize_answer(reference)


def grade_answer(response: str, reference: str) -> bool:
    """Whether a model response's final answer equals the reference; no answer is wrong."""
    given = extract_answer(response)
    return given is not None and answers_match(given, reference)


_GSM8K_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)(/\d+)?")
"""A GSM8K final answer: an integer, decimal or fraction (thousands commas already removed)."""


def parse_gsm8k_answer(answer: str, where: str = "GSM8K answer") -> str:
    """The final answer of a GSM8K solution: the text after its last `####`, commas removed.

    `where` names the source (e.g. `data.jsonl:12 key 'answer'`) for the error message.
    """
    marker = answer.rfind("####")
    if marker < 0:
        raise AnswerParseError(f"{where}: no '####' marker before the final answer in {answer[-80:]!r}")
    final = answer[marker + len("####") :].strip().replace(",", "")
    if not final:
        raise AnswerParseError(f"{where}: nothing after the '####' marker")
    if not _GSM8K_NUMBER.fullmatch(final):
        raise AnswerParseError(f"{where}: the final answer after '####' is not a number: {final[:80]!r}")
    return final
