"""Reward functions the reward_fn_rl tests name as `module:function`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NOT_A_FUNCTION = 3


def says_hello(prompt: Any, completion: str, record: Mapping[str, Any]) -> str:
    return "hello"


def first_char_even(prompt: Any, completion: str, record: Mapping[str, Any]) -> float:
    return float(bool(completion) and ord(completion[0]) % 2 == 0)


def sees_prompt_and_record(prompt: Any, completion: str, record: Mapping[str, Any]) -> dict[str, float]:
    return {"has_prompt": float(prompt == record["prompt"]), "has_answer": float("answer" in record)}


def infinite(prompt: Any, completion: str, record: Mapping[str, Any]) -> float:
    return float("inf")
