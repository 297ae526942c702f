"""The slice of the tinker SDK the adapter calls, as protocols.

The real `tinker.ServiceClient` satisfies them (mypy checks this where `from_env` builds one),
and so does the in-process fake the tests inject, so both are held to the same surface.
Methods that submit work return an SDK future at once; `result_async()` gives the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, TypeVar

from tinker import types
from tinker.lib.retry_handler import RetryConfig

T_co = TypeVar("T_co", covariant=True)

SdkCustomLossFn = Callable[[list[types.Datum], list[Any]], tuple[Any, dict[str, float]]]
SessionStatus = Literal["success", "errored", "interrupted"]


class SdkFuture(Protocol[T_co]):
    async def result_async(self, timeout: float | None = None) -> T_co: ...


SdkLossCall = Callable[
    [list[types.Datum], types.LossFnType, Mapping[str, float | str] | None], SdkFuture[types.ForwardBackwardOutput]
]
"""`forward` or `forward_backward` of an SDK training client."""


class SdkSamplingClient(Protocol):
    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
    ) -> SdkFuture[types.SampleResponse]: ...

    def compute_logprobs(self, prompt: types.ModelInput) -> SdkFuture[list[float | None]]: ...


class SdkTrainingClient(Protocol):
    def forward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> SdkFuture[types.ForwardBackwardOutput]: ...

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> SdkFuture[types.ForwardBackwardOutput]: ...

    def forward_backward_custom(
        self, data: list[types.Datum], loss_fn: SdkCustomLossFn
    ) -> SdkFuture[types.ForwardBackwardOutput]: ...

    def optim_step(self, optim_params: types.AdamParams) -> SdkFuture[types.OptimStepResponse]: ...

    def save_state(self, name: str) -> SdkFuture[types.SaveWeightsResponse]: ...

    def load_state(self, path: str) -> SdkFuture[types.LoadWeightsResponse]: ...

    def load_state_with_optimizer(self, path: str) -> SdkFuture[types.LoadWeightsResponse]: ...

    def save_weights_for_sampler(self, name: str) -> SdkFuture[types.SaveWeightsForSamplerResponse]: ...

    def save_weights_and_get_sampling_client(
        self, *, retry_config: RetryConfig | None = None
    ) -> SdkFuture[SdkSamplingClient]: ...

    def get_tokenizer(self) -> Any:
        """A Hugging Face tokenizer (typed loosely: its `encode` takes more positional arguments)."""
        ...


class SdkServiceClient(Protocol):
    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = ...,
        seed: int | None = None,
        train_mlp: bool = ...,
        train_attn: bool = ...,
        train_unembed: bool = ...,
    ) -> SdkFuture[SdkTrainingClient]: ...

    def create_training_client_from_state(self, path: str) -> SdkFuture[SdkTrainingClient]: ...

    def create_training_client_from_state_with_optimizer(self, path: str) -> SdkFuture[SdkTrainingClient]: ...

    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: RetryConfig | None = None,
    ) -> SdkFuture[SdkSamplingClient]: ...

    def close(self, status: SessionStatus, detail: str | None = None) -> SdkFuture[None]: ...
