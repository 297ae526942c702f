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


def trl_length(completions: list[Any], **kwargs: Any) -> list[float]:
    """TRL's batched signature: every completion of a group at once."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [float(len(text)) for text in texts]


def trl_sees_columns(
    prompts: list[Any], completions: list[Any], completion_ids: list[list[int]], answer: list[str]
) -> list[float | None]:
    """Named TRL arguments only (no **kwargs); None for the completions it does not score."""
    assert len(prompts) == len(completions) == len(completion_ids) == len(answer)
    return [None if i % 2 else float(bool(ids) and answer[i] == answer[0]) for i, ids in enumerate(completion_ids)]


def trl_wrong_length(completions: list[Any], **kwargs: Any) -> list[float]:
    return [1.0]
