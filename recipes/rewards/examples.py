"""Example reward functions for `reward_fn_rl`, registered as `length`, `keyword` and
`length_and_keyword` (or by path: `reward_fn=recipes.rewards.examples:<name>`).

A reward function is called as `fn(prompt, completion, record)`: the prompt (its text, or its
messages for a chat-format record), the sampled reply's text and the whole data set record
(reference answers included); it returns a number, or a dict of named numbers that
`reward_weights` weights. It may be `async`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any


def length_reward(prompt: Any, completion: str, record: Mapping[str, Any]) -> float:
    """1 for a reply of `target_length` characters (default 20), falling linearly to 0 at twice
    or none of that."""
    target = float(record.get("target_length", 20))
    return max(0.0, 1.0 - abs(len(completion.strip()) - target) / target)


def keyword_reward(prompt: Any, completion: str, record: Mapping[str, Any]) -> float:
    """1 when the reply mentions the record's reference `answer` (case-insensitive), else 0."""
    answer = str(record.get("answer", "")).strip().lower()
    return float(bool(answer) and answer in completion.lower())


def length_and_keyword(prompt: Any, completion: str, record: Mapping[str, Any]) -> dict[str, float]:
    """Both scores by name, for `reward_weights: {length: ..., keyword: ...}`."""
    return {"length": length_reward(prompt, completion, record), "keyword": keyword_reward(prompt, completion, record)}


async def async_keyword_reward(prompt: Any, completion: str, record: Mapping[str, Any]) -> float:
    """`keyword_reward` as a coroutine (a judge or a sandbox would await here)."""
    await asyncio.sleep(0)
    return keyword_reward(prompt, completion, record)
