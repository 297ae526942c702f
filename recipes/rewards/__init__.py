"""Reward functions named in a config as `module:function` (TRL's `reward_funcs`, one prompt at a
time): resolving the names, calling them (sync or async) and weighting their scores."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kitchen.callables import import_callable
from kitchen.errors import DataError

RewardCallable = Callable[[Any, str, Mapping[str, Any]], Any]


@dataclass(frozen=True)
class RewardFn:
    spec: str
    """As configured: `module:function`."""
    fn: RewardCallable

    @property
    def name(self) -> str:
        """The score's name when the function returns a single number."""
        return self.spec.rpartition(":")[2]


def resolve_reward_fn(spec: str) -> RewardFn:
    """The callable `spec` names; a ValueError (a config error) saying what is wrong otherwise."""
    return RewardFn(spec, import_callable(spec, "recipes.rewards.examples:length_reward"))


def resolve_reward_fns(specs: Sequence[str]) -> list[RewardFn]:
    fns = [resolve_reward_fn(spec) for spec in specs]
    names = [fn.name for fn in fns]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"two reward functions are both named {duplicated[0]!r}; their scores would clash")
    return fns


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError(f"{where} returned {type(value).__name__} {value!r}; a reward must be a number")
    if not math.isfinite(value):
        raise DataError(f"{where} returned {value!r}; a reward must be finite")
    return float(value)


async def score(fns: Sequence[RewardFn], prompt: Any, completion: str, record: Mapping[str, Any]) -> dict[str, float]:
    """Every function's named scores for one completion: a number is named after its function; a
    dict gives its own names."""
    scores: dict[str, float] = {}
    for reward_fn in fns:
        result = reward_fn.fn(prompt, completion, record)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, Mapping):
            if not result:
                raise DataError(f"reward function {reward_fn.spec} returned an empty dict")
            for key, value in result.items():
                scores[str(key)] = _number(value, f"reward function {reward_fn.spec} (score {key!r})")
        else:
            scores[reward_fn.name] = _number(result, f"reward function {reward_fn.spec}")
    return scores


def weighted_total(scores: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Sum of the scores, each times its weight (1 when not given). A weight naming no score is
    an error: a typo would otherwise silently drop a term."""
    unknown = sorted(set(weights) - set(scores))
    if unknown:
        raise DataError(
            f"reward_weights names {unknown[0]!r}, which no reward function returned (scores: {sorted(scores)})"
        )
    return sum(weights.get(name, 1.0) * value for name, value in scores.items())
