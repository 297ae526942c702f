"""Checking a loss request before it is sent, so a mistake fails at once and names itself.

The service would reject the same mistakes, but only after a round trip and in its own words.
Names, config keys and required inputs come from `train_core.losses`, the one description of the
losses every backend shares; the config goes out as given (the service applies the same defaults).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard, get_args

from tinker import types as sdk

from kitchen.engine.errors import ConfigError, DataError
from train_core.losses import TARGET_TOKENS, get_loss_fn, require_inputs
from train_core.types import Datum

SDK_LOSS_FNS: frozenset[str] = frozenset(get_args(sdk.LossFnType))
"""Every loss name the SDK's `forward_backward` accepts."""


def _is_sdk_loss_fn(name: str) -> TypeGuard[sdk.LossFnType]:
    return name in SDK_LOSS_FNS


def check_loss_request(data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None) -> sdk.LossFnType:
    """The loss name as the SDK types it, after checking the name, the config and each datum's inputs."""
    _require_data(data)
    if not _is_sdk_loss_fn(loss_fn):
        raise ConfigError(f"loss_fn {loss_fn!r} is not one the Tinker service runs ({sorted(SDK_LOSS_FNS)})")
    spec = get_loss_fn(loss_fn)  # the service's own losses are train_core's built-ins
    spec.resolve_config(loss_fn_config)
    reasons = spec.custom_route_reasons(loss_fn_config)
    if reasons:
        raise ConfigError(
            f"loss_fn {loss_fn!r}: {'; '.join(reasons)}, which the Tinker service's built-in loss would not "
            "apply; such a loss runs through forward_backward_custom (train_core.rl.policy_objective)"
        )
    for index, datum in enumerate(data):
        require_inputs(datum.loss_fn_inputs.keys(), spec.required_inputs, f"loss {loss_fn!r}", f"datum {index}")
    return loss_fn


def check_custom_loss_request(data: Sequence[Datum]) -> None:
    """The SDK's custom-loss path scores each datum's target_tokens, so each needs them."""
    _require_data(data)
    for index, datum in enumerate(data):
        require_inputs(datum.loss_fn_inputs.keys(), (TARGET_TOKENS,), "forward_backward_custom", f"datum {index}")


def _require_data(data: Sequence[Datum]) -> None:
    if not data:
        raise DataError("a training request needs at least one datum, got none")
