"""Reward functions by name: the `kitchen.rewards` entry-point group (`kitchen.engine.plugins`).

A package registers a reward function under a name, and a config names it (`reward_fn: NAME`)
where it would otherwise write `module:function`. The function is either per-sample,
`fn(prompt, completion, record)`, or TRL's batched `fn(completions, **kwargs)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kitchen.engine.plugins import ExtensionPoint

RewardCallable = Callable[..., Any]
"""`fn(prompt, completion, record)`, or TRL's batched `fn(completions, **kwargs)`."""


def _check(name: str, obj: Any) -> RewardCallable:
    if not callable(obj):
        raise TypeError("is not a reward function (per sample, or TRL's batched form)")
    reward: RewardCallable = obj
    return reward


REWARDS: ExtensionPoint[RewardCallable] = ExtensionPoint("kitchen.rewards", "reward function", _check)
