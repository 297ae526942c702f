"""The TrainingClient port on an SDK training client.

Every method submits to the SDK at once, so requests keep their submission order, and returns
an awaitable for the converted result (an asyncio task wrapping the SDK future).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable, Sequence
from typing import Any

from tinker import types as sdk

from adapters.tinker.calls import submit
from adapters.tinker.convert import (
    adam_params_to_sdk,
    datum_to_sdk,
    forward_backward_output_from_sdk,
    optim_step_output_from_sdk,
)
from adapters.tinker.loss_requests import check_custom_loss_request, check_loss_request
from adapters.tinker.paths import require_tinker_path
from adapters.tinker.redaction import Redactor
from adapters.tinker.retry import RetryPolicy
from adapters.tinker.sampling_client import TinkerSamplingClient
from adapters.tinker.sdk_surface import SdkFuture, SdkLossCall, SdkSamplingClient, SdkTrainingClient
from kitchen.engine.ports import CustomLossFn, Tokenizer
from train_core.types import AdamParams, Datum, ForwardBackwardOutput, OptimStepOutput


class TinkerTrainingClient:
    """A LoRA training run on the Tinker service."""

    def __init__(self, sdk_client: SdkTrainingClient, *, policy: RetryPolicy, redactor: Redactor) -> None:
        self._sdk = sdk_client
        self._policy = policy
        self._retry_config = policy.sdk_retry_config()
        self._redactor = redactor

    async def forward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> Awaitable[ForwardBackwardOutput]:
        return self._submit_loss("forward", self._sdk.forward, data, loss_fn, loss_fn_config)

    async def forward_backward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> Awaitable[ForwardBackwardOutput]:
        return self._submit_loss("forward_backward", self._sdk.forward_backward, data, loss_fn, loss_fn_config)

    async def forward_backward_custom(
        self, data: Sequence[Datum], loss_fn: CustomLossFn
    ) -> Awaitable[ForwardBackwardOutput]:
        """The SDK's own custom-loss path: a forward, `loss_fn` locally, then a linearised backward.

        `loss_fn` sees kitchen's datums (the ones passed here) and the SDK's per-datum logprobs.
        """
        kitchen_data = list(data)
        check_custom_loss_request(kitchen_data)
        sdk_data = [datum_to_sdk(d) for d in kitchen_data]

        def sdk_loss_fn(_sdk_data: list[sdk.Datum], logprobs_D: list[Any]) -> tuple[Any, dict[str, float]]:
            return loss_fn(kitchen_data, logprobs_D)

        return submit(
            "forward_backward_custom",
            lambda: self._sdk.forward_backward_custom(sdk_data, sdk_loss_fn),
            forward_backward_output_from_sdk,
            self._redactor,
            self._policy,
        )

    async def optim_step(self, adam_params: AdamParams) -> Awaitable[OptimStepOutput]:
        sdk_params = adam_params_to_sdk(adam_params)
        return submit(
            "optim_step",
            lambda: self._sdk.optim_step(sdk_params),
            optim_step_output_from_sdk,
            self._redactor,
            self._policy,
        )

    async def save_state(self, name: str) -> Awaitable[str]:
        return submit("save_state", lambda: self._sdk.save_state(name), lambda r: r.path, self._redactor, self._policy)

    async def load_state(self, path: str, with_optimizer: bool = True) -> Awaitable[None]:
        """Load a saved state into this client (the SDK deprecates this in favour of creating a
        new client from the state, which is what resume does; its warning is silenced here)."""
        require_tinker_path(path, "load_state")

        def start() -> SdkFuture[sdk.LoadWeightsResponse]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                if with_optimizer:
                    return self._sdk.load_state_with_optimizer(path)
                return self._sdk.load_state(path)

        return submit("load_state", start, lambda _response: None, self._redactor, self._policy)

    async def save_weights_for_sampler(self, name: str) -> Awaitable[str]:
        return submit(
            "save_weights_for_sampler",
            lambda: self._sdk.save_weights_for_sampler(name),
            lambda r: r.path,
            self._redactor,
            self._policy,
        )

    async def save_weights_and_get_sampling_client(self, name: str | None = None) -> TinkerSamplingClient:
        """A sampler on a snapshot of the current weights. `name` is unused: the service keeps
        these snapshots ephemeral (use save_weights_for_sampler for a named, durable one)."""

        def wrap(sampler: SdkSamplingClient) -> TinkerSamplingClient:
            return TinkerSamplingClient(sampler, self._redactor, self._policy)

        return await submit(
            "save_weights_and_get_sampling_client",
            lambda: self._sdk.save_weights_and_get_sampling_client(retry_config=self._retry_config),
            wrap,
            self._redactor,
            self._policy,
        )

    def _submit_loss(
        self,
        call: str,
        send: SdkLossCall,
        data: Sequence[Datum],
        loss_fn: str,
        loss_fn_config: dict[str, float] | None,
    ) -> asyncio.Task[ForwardBackwardOutput]:
        sdk_loss = check_loss_request(data, loss_fn, loss_fn_config)
        sdk_data = [datum_to_sdk(d) for d in data]
        return submit(
            call,
            lambda: send(sdk_data, sdk_loss, loss_fn_config),
            forward_backward_output_from_sdk,
            self._redactor,
            self._policy,
        )

    def get_tokenizer(self) -> Tokenizer:
        tokenizer: Tokenizer = self._sdk.get_tokenizer()
        return tokenizer

    def __repr__(self) -> str:
        return "TinkerTrainingClient()"
