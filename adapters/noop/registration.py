"""The noop backend's entry in kitchen's backend registry: its config section and factory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kitchen.engine.backends import BackendSpec
from kitchen.engine.callables import import_callable
from kitchen.engine.errors import ConfigError
from kitchen.engine.ports import ServiceBackend
from train_core.losses import LossTable


class NoopSettings(BaseModel):
    """Config section `noop`: the fake backend for integration tests and benchmarks."""

    model_config = ConfigDict(extra="forbid")

    latency: dict[str, float] = Field(
        default_factory=dict, description="seconds per call kind (e.g. sample, forward_backward)"
    )
    replies: str | None = Field(
        None,
        description="module:function scripting the fake model: prompt text -> reply text (tests of a served noop)",
    )


def create(config: Any, settings: NoopSettings, checkpoint_dir: Path, losses: LossTable) -> ServiceBackend:
    from adapters.noop.backend import NoopBackend

    latency = dict(settings.latency)
    backend = NoopBackend(seed=config.seed, latency=latency, checkpoint_dir=checkpoint_dir, losses=losses)
    if settings.replies is not None:
        try:
            backend.script(import_callable(settings.replies, "my_tests.script:reply"))
        except ValueError as error:
            raise ConfigError(f"noop.replies: {error}") from None
    return backend


BACKEND = BackendSpec(
    name="noop",
    description="seeded fake model with real shapes, optional simulated latency (integration tests)",
    settings=NoopSettings,
    create=create,
    moved_keys={"noop_latency": "latency"},
    export_hint="the noop backend has no model weights to export",
)
