"""The ServiceBackend port on the official tinker SDK: LoRA training and sampling on the service.

Build it with `TinkerBackend.from_env(base_url)`, which reads the API key only from
TINKER_API_KEY, or inject any object with the SDK's ServiceClient surface (tests pass a fake).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

import tinker
from tinker.lib.public_interfaces.sampling_client import _load_tokenizer_from_model_info

from adapters.common.tiny import EMBEDDED_MODELS
from adapters.common.tokenizer import load_tokenizer
from adapters.tinker.availability import read_api_key
from adapters.tinker.calls import open_remote
from adapters.tinker.paths import require_tinker_path
from adapters.tinker.redaction import Redactor
from adapters.tinker.retry import RetryPolicy, with_retries
from adapters.tinker.sampling_client import TinkerSamplingClient
from adapters.tinker.sdk_surface import SdkFuture, SdkServiceClient, SdkTrainingClient
from adapters.tinker.training_client import TinkerTrainingClient
from kitchen.engine.errors import ConfigError
from kitchen.engine.ports import Tokenizer
from kitchen.engine.usage import TokenPrices
from train_core.types import LoraLayers

LORA_ONLY_MESSAGE = (
    "lora_rank: the Tinker service trains LoRA adapters only; set lora_rank (for example "
    "lora_rank: 32) to use backend tinker"
)


class ServiceClientFactory(Protocol):
    def __call__(self, *, base_url: str | None, api_key: str) -> SdkServiceClient: ...


def sdk_tokenizer(base_model: str) -> Tokenizer:
    """The tokenizer the SDK's own clients load for `base_model` (its model-name mapping included).

    The SDK offers this publicly only on a live client; its loader is called directly so that
    a tokenizer needs no session. kitchen's embedded models (`tiny`, `tiny32`, `tiny64k`,
    `tiny-vl`, which `kitchen serve` serves by those names) use kitchen's own tokenizer. A name
    the SDK cannot load (offline, not in the HF cache) is a ConfigError saying what works, not a raw OSError.
    """
    if base_model in EMBEDDED_MODELS:
        return load_tokenizer(base_model)
    try:
        # A Hugging Face tokenizer; its `decode` is typed more loosely than the port's protocol.
        return cast(Tokenizer, _load_tokenizer_from_model_info(base_model))
    except OSError as exc:
        raise ConfigError(
            f"model_name {base_model!r}: the tinker SDK cannot load its tokenizer ({exc}). It loads tokenizers "
            "from the Hugging Face hub by model name: use a name whose files are in the local HF cache, or a "
            "local folder (with kitchen serve, name the model by its folder in the models file)"
        ) from None


class TinkerBackend:
    """ServiceBackend for the Tinker service."""

    name = "tinker"

    def __init__(
        self,
        service_client: SdkServiceClient,
        *,
        retry: RetryPolicy | None = None,
        redactor: Redactor | None = None,
        load_tokenizer: Callable[[str], Tokenizer] | None = None,
        base_url: str | None = None,
        token_prices: TokenPrices | None = None,
    ) -> None:
        self.token_prices = token_prices
        """The user's price table (`tinker.prices`): runs log each step's estimated cost."""
        self._service = service_client
        self._retry = retry or RetryPolicy()
        self._redactor = redactor or Redactor()
        self._load_tokenizer = load_tokenizer or sdk_tokenizer
        self._base_url = base_url

    @classmethod
    def from_env(
        cls,
        base_url: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        service_client_factory: ServiceClientFactory | None = None,
        token_prices: TokenPrices | None = None,
    ) -> TinkerBackend:
        """Check the SDK and TINKER_API_KEY first (one clear error), then build the SDK client."""
        api_key = read_api_key()
        factory: ServiceClientFactory = service_client_factory or tinker.ServiceClient
        return cls(
            factory(base_url=base_url, api_key=api_key),
            retry=retry,
            redactor=Redactor(api_key),
            base_url=base_url,
            token_prices=token_prices,
        )

    async def create_training_client(
        self, base_model: str, lora_rank: int | None = None, seed: int = 0
    ) -> TinkerTrainingClient:
        if lora_rank is None:
            raise ConfigError(LORA_ONLY_MESSAGE)
        return await self.create_lora_training_client(base_model, lora_rank, seed, LoraLayers())

    async def create_lora_training_client(
        self, base_model: str, lora_rank: int, seed: int, layers: LoraLayers
    ) -> TinkerTrainingClient:
        """A LoRA client on `layers`: kitchen's default is every linear layer but the output
        head, as the local backend has it (the service's own default also trains the head)."""
        if lora_rank <= 0:
            raise ConfigError(f"lora_rank: must be a positive integer, got {lora_rank}")
        return await self._open_training_client(
            "create_training_client",
            lambda: self._service.create_lora_training_client(
                base_model,
                rank=lora_rank,
                seed=seed,
                train_attn=layers.attn,
                train_mlp=layers.mlp,
                train_unembed=layers.unembed,
            ),
        )

    async def create_training_client_from_state(self, path: str, with_optimizer: bool = True) -> TinkerTrainingClient:
        """Resume (`with_optimizer`) or start from saved weights with a fresh optimizer."""
        require_tinker_path(path, "create_training_client_from_state")
        if with_optimizer:
            return await self._open_training_client(
                "create_training_client_from_state",
                lambda: self._service.create_training_client_from_state_with_optimizer(path),
            )
        return await self._open_training_client(
            "create_training_client_from_state",
            lambda: self._service.create_training_client_from_state(path),
        )

    async def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> TinkerSamplingClient:
        if model_path is None and base_model is None:
            raise ConfigError("create_sampling_client: give a sampler model_path or a base_model")
        if model_path is not None:
            require_tinker_path(model_path, "create_sampling_client")
        retry_config = self._retry.sdk_retry_config()
        sampler = await with_retries(
            "create_sampling_client",
            lambda: open_remote(
                "create_sampling_client",
                lambda: self._service.create_sampling_client(
                    model_path=model_path, base_model=base_model, retry_config=retry_config
                ),
                self._retry,
            ),
            self._retry,
            self._redactor,
        )
        return TinkerSamplingClient(sampler, self._redactor, self._retry)

    def get_tokenizer(self, base_model: str) -> Tokenizer:
        return self._load_tokenizer(base_model)

    async def close(self) -> None:
        """End the service session (the SDK stops its heartbeats and releases connections)."""
        await with_retries(
            "close",
            lambda: open_remote("close", lambda: self._service.close("success"), self._retry),
            self._retry,
            self._redactor,
        )

    async def _open_training_client(
        self, call: str, start: Callable[[], SdkFuture[SdkTrainingClient]]
    ) -> TinkerTrainingClient:
        sdk_client = await with_retries(
            call, lambda: open_remote(call, start, self._retry), self._retry, self._redactor
        )
        return TinkerTrainingClient(sdk_client, policy=self._retry, redactor=self._redactor)

    def __repr__(self) -> str:
        return f"TinkerBackend(base_url={self._base_url!r})"
