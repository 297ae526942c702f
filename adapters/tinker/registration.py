"""The tinker backend's entry in kitchen's backend registry: its config section, factory and
capabilities (checked by `kitchen validate` with no SDK and no network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from adapters.tinker import capabilities
from kitchen.engine.backends import BackendSpec
from kitchen.engine.ports import ServiceBackend
from kitchen.engine.usage import TokenPrices
from train_core.losses import LossTable


class TinkerSettings(BaseModel):
    """Config section `tinker`: the remote service (the API key comes only from TINKER_API_KEY)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(None, description="service URL; default: the SDK's")
    request_timeout_s: float = Field(
        1800.0, gt=0, description="total deadline for one request, the SDK's own retries included, before the run fails"
    )
    progress_interval_s: float = Field(
        30.0, gt=0, description="how often a request still without an answer logs what the service last said"
    )
    prices: TokenPrices | None = Field(
        None,
        description="USD per million tokens ({prompt, sampled, trained}, from the service's price list for the "
        "model): each step logs usage/cost_usd, its estimated cost",
    )


def create(config: Any, settings: TinkerSettings, checkpoint_dir: Path, losses: LossTable) -> ServiceBackend:
    """The service runs only its own losses (train_core's built-ins), so `losses` is not needed."""
    from adapters.tinker import TinkerBackend
    from adapters.tinker.retry import RetryPolicy

    policy = RetryPolicy(request_timeout_s=settings.request_timeout_s, progress_interval_s=settings.progress_interval_s)
    return TinkerBackend.from_env(base_url=settings.base_url, retry=policy, token_prices=settings.prices)


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
