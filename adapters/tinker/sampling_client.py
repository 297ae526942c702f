"""The SamplingClient port on an SDK sampling client: a frozen set of weights to sample and score."""

from __future__ import annotations

from adapters.tinker.calls import submit
from adapters.tinker.convert import (
    model_input_to_sdk,
    prompt_logprobs_from_sdk,
    prompt_scores_from_sdk,
    sample_result_from_sdk,
    sampling_params_to_sdk,
)
from adapters.tinker.redaction import Redactor
from adapters.tinker.retry import RetryPolicy
from adapters.tinker.sdk_surface import SdkSamplingClient
from kitchen.engine.errors import ConfigError, DataError
from train_core.types import ModelInput, PromptDetail, PromptScores, SampleResult, SamplingParams


def _non_empty(prompt: ModelInput, call: str) -> ModelInput:
    if prompt.length == 0:
        raise DataError(f"{call}: the prompt is empty; it needs at least one token")
    return prompt


class TinkerSamplingClient:
    """Samples and scores through the SDK, which retries transient errors with our RetryConfig."""

    def __init__(self, sdk_client: SdkSamplingClient, redactor: Redactor, policy: RetryPolicy) -> None:
        self._sdk = sdk_client
        self._redactor = redactor
        self._policy = policy

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult:
        sdk_prompt = model_input_to_sdk(_non_empty(prompt, "sample"))
        sdk_params = sampling_params_to_sdk(sampling_params)
        k = sampling_params.topk_logprobs
        return await submit(
            "sample",
            lambda: (
                self._sdk.sample(sdk_prompt, num_samples, sdk_params, topk_sample_logprobs=k)
                if k
                else self._sdk.sample(sdk_prompt, num_samples, sdk_params)
            ),
            sample_result_from_sdk,
            self._redactor,
            self._policy,
        )

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        sdk_prompt = model_input_to_sdk(_non_empty(prompt, "compute_logprobs"))
        return await submit(
            "compute_logprobs",
            lambda: self._sdk.compute_logprobs(sdk_prompt),
            prompt_logprobs_from_sdk,
            self._redactor,
            self._policy,
        )

    async def score_prompt(self, prompt: ModelInput, detail: PromptDetail) -> PromptScores:
        """The prompt's logprobs and its top-k at each position, from one sample request that asks
        for them (one token sampled, unused). Target and alternative-token grids are not asked
        through this adapter."""
        if detail.targets is not None or detail.alt_k:
            raise ConfigError(
                "score_prompt: the tinker backend reports top-k prompt logprobs only, not target or "
                "alternative-token grids; use backend=local"
            )
        sdk_prompt = model_input_to_sdk(_non_empty(prompt, "score_prompt"))
        sdk_params = sampling_params_to_sdk(SamplingParams(max_tokens=1, seed=detail.seed))
        return await submit(
            "score_prompt",
            lambda: self._sdk.sample(
                sdk_prompt, 1, sdk_params, include_prompt_logprobs=True, topk_prompt_logprobs=detail.topk
            ),
            prompt_scores_from_sdk,
            self._redactor,
            self._policy,
        )

    def __repr__(self) -> str:
        return "TinkerSamplingClient()"
