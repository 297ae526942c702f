"""Loss functions by name: train_core's table (the Tinker service's losses and kitchen's own)
plus every `kitchen.losses` entry point (`kitchen.engine.plugins`), registered into that table on first
use so that backends computing losses themselves find them too."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from kitchen.engine.plugins import ExtensionPoint
from train_core import losses
from train_core.losses import LossSpec, LossTable


def _check(name: str, obj: Any) -> LossSpec:
    if not isinstance(obj, LossSpec):
        raise TypeError(f"is not a train_core.losses.LossSpec (got {type(obj).__name__})")
    if obj.name != name:
        raise TypeError(f"its LossSpec is named {obj.name!r}; the entry point's name must match")
    return obj


LOSSES: ExtensionPoint[LossSpec] = ExtensionPoint(
    "kitchen.losses", "loss", _check, lambda name, spec: losses.register_loss(spec)
)


def loss_table() -> LossTable:
    """Every loss by name, plugins' included: the table a backend computes built-in losses with
    (`BackendSpec.build` hands it to the backend's factory)."""
    LOSSES.load()
    return MappingProxyType(losses.LOSS_SPECS)


def get_loss_fn(name: str) -> LossSpec:
    """The loss called `name`, plugins' included; an unknown name is an InvalidInputError
    listing the known ones."""
    LOSSES.load()
    return losses.get_loss_fn(name)


def rl_loss_names() -> tuple[str, ...]:
    """The policy-gradient losses, plugins' included."""
    LOSSES.load()
    return losses.rl_loss_names()
