"""Reward functions named in a config (TRL's `reward_funcs`) as `module:function` or by a name
registered in the `kitchen.rewards` entry-point group: resolving the names, calling them (sync
or async) and weighting their scores.

Two kinds, told apart by the signature: per-sample `fn(prompt, completion, record)` returning a
number or a dict of named numbers; and TRL's batched `fn(completions, **kwargs)` (a parameter
named `completions`) returning one number (or None: not applicable) per completion of a group,
called with `prompts`, `completions`, `completion_ids` and the record's other columns, one entry
per completion, as TRL's GRPO trainer calls them.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitchen.engine.callables import import_callable
from kitchen.engine.errors import ConfigError, DataError
from kitchen.engine.rewards import REWARDS, RewardCallable


@dataclass(frozen=True)
class RewardFn:
    spec: str
    """As configured: `module:function`, or a registered name."""
    fn: RewardCallable

    @property
    def name(self) -> str:
        """The score's name when the function returns a single number."""
        return self.spec.rpartition(":")[2]

    @property
    def batched(self) -> bool:
        """TRL-style: takes all `completions` of a group at once (a parameter of that name)."""
        try:
            return "completions" in inspect.signature(self.fn).parameters
        except (TypeError, ValueError):  # no readable signature (a builtin): per-sample
            return False


def resolve_reward_fn(spec: str, config_dir: Path | None = None) -> RewardFn:
    """The callable `spec` names: a reward function registered under that name, or a
    `module:function` whose module is looked for beside the config file (`config_dir`) and in the
    working directory when it is not importable as it is (`kitchen.engine.callables`); a ValueError (a
    config error) saying what is wrong otherwise."""
    if ":" not in spec:
        try:
            return RewardFn(spec, REWARDS.get(spec))
        except ConfigError as exc:
            raise ValueError(f"{exc}; or name one as module:function") from None
    folders = [*([config_dir] if config_dir else []), Path.cwd()]
    return RewardFn(spec, import_callable(spec, "recipes.rewards.examples:length_reward", folders))


def resolve_reward_fns(specs: Sequence[str], config_dir: Path | None = None) -> list[RewardFn]:
    fns = [resolve_reward_fn(spec, config_dir) for spec in specs]
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
    """Every per-sample function's named scores for one completion: a number is named after its
    function; a dict gives its own names."""
    scores: dict[str, float] = {}
    for reward_fn in fns:
        if reward_fn.batched:
            continue
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


@dataclass(frozen=True)
class Completion:
    """One sampled reply, as the reward functions see it."""

    text: str
    token_ids: list[int]


async def score_group(
    fns: Sequence[RewardFn], prompt: Any, completions: Sequence[Completion], record: Mapping[str, Any]
) -> list[dict[str, float]]:
    """Named scores of each completion of one prompt: per-sample functions one completion at a
    time (concurrently), batched ones once for all. A batched function's None leaves its score out
    for that completion."""
    per_sample = await asyncio.gather(*(score(fns, prompt, c.text, record) for c in completions))
    for reward_fn in (fn for fn in fns if fn.batched):
        values = await _call_batched(reward_fn, prompt, completions, record)
        for scores, value in zip(per_sample, values, strict=True):
            if value is not None:
                scores[reward_fn.name] = value
    return per_sample


async def _call_batched(
    reward_fn: RewardFn, prompt: Any, completions: Sequence[Completion], record: Mapping[str, Any]
) -> list[float | None]:
    n = len(completions)
    conversational = isinstance(prompt, list)
    columns = {key: [value] * n for key, value in record.items() if key not in ("prompt", "messages", "completion")}
    available: dict[str, Any] = {
        **columns,
        "prompts": [prompt] * n,
        "completions": [[{"role": "assistant", "content": c.text}] if conversational else c.text for c in completions],
        "completion_ids": [c.token_ids for c in completions],
    }
    parameters = inspect.signature(reward_fn.fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        available = {key: value for key, value in available.items() if key in parameters}
    where = f"reward function {reward_fn.spec}"
    try:
        result = reward_fn.fn(**available)
    except TypeError as exc:
        raise DataError(f"{where} (batched, TRL-style) cannot be called with {sorted(available)}: {exc}") from None
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, (list, tuple)) or len(result) != n:
        got = f"{len(result)} values" if isinstance(result, (list, tuple)) else type(result).__name__
        raise DataError(f"{where} (batched) returned {got}; it must return a list of {n} numbers, one per completion")
    return [None if value is None else _number(value, f"{where} (completion {i})") for i, value in enumerate(result)]


def weighted_total(scores: Mapping[str, float], weights: Mapping[str, float], optional: Sequence[str] = ()) -> float:
    """Sum of the scores, each times its weight (1 when not given). A weight naming no score is
    an error (a typo would otherwise silently drop a term), unless its score is `optional` (a
    batched function that may answer None)."""
    unknown = sorted(set(weights) - set(scores) - set(optional))
    if unknown:
        raise DataError(
            f"reward_weights names {unknown[0]!r}, which no reward function returned (scores: {sorted(scores)})"
        )
    return sum(weights.get(name, 1.0) * value for name, value in scores.items())
