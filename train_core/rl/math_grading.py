"""Grading math answers with math-verify: find the reply's final answer (the last `\\boxed{}`
first, then "final answer is ..." phrasings, then the last expression), parse it and the
reference to SymPy, and compare them mathematically (`1,000` = `1000.0`, `\\frac{1}{2}` = `0.5`,
`50\\%` = `0.5`...).

Two rules on top of math-verify (see the tests): against a plain-number reference, a final answer
that is itself an unevaluated sum, difference or product (`3 + 4`, often the question echoed) is
not an answer, so a policy cannot earn reward by repeating the question; and an escaped dollar
(`\\$5.00`) is a currency sign, dropped before parsing (math-verify would find no answer in it).

math-verify bounds each parse and comparison with a SIGALRM timeout, which only the main thread
may set; elsewhere the bound is left off.
"""

from __future__ import annotations

import re
import threading
from functools import cache, lru_cache
from typing import Any

from train_core.errors import InvalidInputError

_BOX_COMMANDS = ("\\boxed{", "\\fbox{")
# A sign counts only where it cannot be a binary minus/plus ("5-6" is 5 and 6, not 5 and -6).
_NUMBER = re.compile(r"(?:(?<![\w)])[-+])?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_OPERATION = re.compile(r"[\d)}]\s*(?:[-+*×]|\\times|\\cdot)\s*[-+]?[\d(\\{]")
"""A binary arithmetic operation between two operands: what a final value does not contain."""
TIMEOUT_S = 5


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


@cache
def _configs() -> tuple[Any, ...]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    # The shipped envs ask for `\boxed{}`: a boxed answer wins over any other phrasing.
    return LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()


def _timeout() -> int | None:
    return TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


@lru_cache(maxsize=4096)
def _parse(text: str) -> tuple[Any, ...]:
    """math-verify's parse of `text`: (SymPy object, the extracted string), or () for no answer."""
    from math_verify import parse

    text = text.replace("\\$", "")
    return tuple(parse(text, list(_configs()), parsing_timeout=_timeout()))


def _reference(reference: str) -> tuple[Any, ...]:
    """A reference answer as math-verify reads gold answers: as LaTeX."""
    return _parse(reference if reference.lstrip().startswith("$") else f"${reference}$")


def extract_answer(text: str) -> str | None:
    """The reply's final answer as written, or None when it states none."""
    parsed = _parse(text)
    return str(parsed[-1]) if parsed else None


def _is_unevaluated(answer: str, reference: str) -> bool:
    return bool(_OPERATION.search(answer)) and not _OPERATION.search(reference)


@lru_cache(maxsize=65536)
def grade_answer(response: str, reference: str) -> bool:
    """Whether a reply's final answer equals the reference mathematically; no answer is wrong."""
    from math_verify import verify

    parsed, gold = _parse(response), _reference(reference)
    if not parsed or not gold or _is_unevaluated(str(parsed[-1]), reference):
        return False
    return bool(verify(list(gold), list(parsed), timeout_seconds=_timeout()))


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
