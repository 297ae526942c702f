"""Graders for generative tasks: `fn(prompt, response, record)`, the shape of kitchen's reward
functions (`prompt` as the record holds it, `response` the reply's text, `record` the whole
record), sync or async. It returns a bool (right or wrong), a number (a reward: right when at
least 1), or a dict with `correct`, `score`, `reason` and `answer` (the final answer maj@k votes
on). Named graders are built in (`math`, `exact`) or registered; others are `module:function`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kitchen.engine.callables import import_callable
from kitchen.engine.errors import ConfigError, DataError
from kitchen.engine.eval_tasks import GraderFn
from kitchen.families.evaluation.generation import Grade, Item
from train_core.rl.math_grading import extract_answer, grade_answer

_DICT_KEYS = frozenset({"correct", "score", "reason", "answer"})


class GraderError(DataError):
    """A grader that raised or returned something that is not a grade; names grader and item."""


def _reference(record: Mapping[str, Any]) -> str:
    answer = record.get("answer")
    if not isinstance(answer, str | int | float) or isinstance(answer, bool):
        raise ValueError("the record needs an 'answer' (a string or a number) to grade against")
    return str(answer)


def math_grader(prompt: Any, response: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """The reply's final answer (last `\\boxed{}`, else last number) equals the record's `answer`
    mathematically (math-verify)."""
    reference = _reference(record)
    given = extract_answer(response)
    correct = grade_answer(response, reference)
    reason = "no final answer" if given is None else f"answer {given!r} {'=' if correct else '!='} {reference!r}"
    return {"correct": correct, "reason": reason, "answer": given}


def exact_grader(prompt: Any, response: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """The reply, stripped, is the record's `answer`, stripped."""
    reference = _reference(record).strip()
    correct = response.strip() == reference
    return {"correct": correct, "reason": "exact match" if correct else f"expected {reference!r}"}


def as_grade(value: Any, where: str) -> Grade:
    """A grader's return value as a Grade; anything else is a GraderError naming `where`."""
    if isinstance(value, bool):
        return Grade(value, float(value))
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise GraderError(f"{where} returned {value!r}; a score must be finite")
        return Grade(value >= 1.0, float(value))
    if isinstance(value, Mapping):
        unknown = sorted(set(map(str, value)) - _DICT_KEYS)
        if unknown:
            raise GraderError(f"{where} returned unknown key {unknown[0]!r}; a grade has {sorted(_DICT_KEYS)}")
        correct, score = value.get("correct"), value.get("score")
        if correct is None and score is None:
            raise GraderError(f"{where} returned a dict with neither 'correct' nor 'score'")
        if correct is not None and not isinstance(correct, bool):
            raise GraderError(f"{where} returned 'correct' = {correct!r}; it must be a bool")
        base = as_grade(correct if score is None else score, where)  # a score, else the bool
        reason, answer = value.get("reason", ""), value.get("answer")
        if not isinstance(reason, str) or not (answer is None or isinstance(answer, str)):
            raise GraderError(f"{where} returned a non-string 'reason' or 'answer'")
        return Grade(base.correct if correct is None else correct, base.score, reason, answer)
    raise GraderError(f"{where} returned {type(value).__name__} {value!r}; a grade is a bool, a number or a dict")


@dataclass(frozen=True)
class Grader:
    spec: str
    """As named: a registered grader or `module:function`."""
    fn: GraderFn

    async def __call__(self, item: Item, response: str) -> Grade:
        prompt = item.record.get("prompt", item.record.get("messages", item.prompt))
        where = f"grader {self.spec} on {item.where or 'an item'}"
        try:
            result = self.fn(prompt, response, item.record)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            raise GraderError(f"{where} raised {type(exc).__name__}: {exc}") from exc
        return as_grade(result, where)


def resolve_grader(spec: str, registered: Mapping[str, GraderFn]) -> Grader:
    """A named grader (`registered`) or the function `spec` names as `module:function`."""
    if spec in registered:
        return Grader(spec, registered[spec])
    if ":" not in spec:
        import difflib

        close = difflib.get_close_matches(spec, registered, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            f"unknown grader {spec!r}; {hint}named graders: {', '.join(sorted(registered))}, or give module:function"
        )
    try:
        return Grader(spec, import_callable(spec, "my_graders:grade"))
    except ValueError as exc:
        raise ConfigError(f"grader {exc}") from None
