"""Graders that the eval tests name as `module:function`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def contains_answer(prompt: Any, response: str, record: Mapping[str, Any]) -> dict[str, Any]:
    correct = str(record["answer"]) in response
    return {"correct": correct, "reason": "found" if correct else "missing", "answer": response.strip()[:8]}


def explodes(prompt: Any, response: str, record: Mapping[str, Any]) -> bool:
    raise ZeroDivisionError("the grader divided by zero")


def returns_text(prompt: Any, response: str, record: Mapping[str, Any]) -> str:
    return "yes"


def by_length(prompt: Any, response: str, record: Mapping[str, Any]) -> float:
    """A score that moves with the reply (for tests where the fake model's replies change with
    its weights): the reply's length, folded into [0, 1]."""
    return (len(response) % 11) / 10
