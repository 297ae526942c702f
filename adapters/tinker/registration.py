"""The tinker backend's entry in kitchen's backend registry: its config section, factory and
capabilities (checked by `kitchen validate` with no SDK and no network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from adapters.tinker import capabilities
from kitchen.backends import BackendSpec
from kitchen.ports import ServiceBackend


class TinkerSettings(BaseModel):
    """Config section `tinker`: the remote service (the API key comes only from TINKER_API_KEY)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(None, description="service URL; default: the SDK's")


def create(config: Any, settings: TinkerSettings, checkpoint_dir: Path) -> ServiceBackend:
    from adapters.tinker import TinkerBackend

    return TinkerBackend.from_env(base_url=settings.base_url)


BACKEND = BackendSpec(
    name="tinker",
    description="the Tinker service through the official tinker SDK (LoRA only)",
    settings=TinkerSettings,
    create=create,
    supported_calls=capabilities.SUPPORTED_CALLS,
    supported_losses=capabilities.SUPPORTED_LOSS_FNS,
    requires_lora_rank=capabilities.REQUIRES_LORA_RANK,
    moved_keys={"base_url": "base_url"},
    export_hint=(
        "tinker checkpoints live on the service: download one with the SDK's CLI, "
        "`tinker checkpoint download tinker://...` (a PEFT adapter; `tinker checkpoint push-hf` "
        "uploads it to the Hugging Face Hub instead)"
    ),
)
