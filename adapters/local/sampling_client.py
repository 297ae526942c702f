"""SamplingClient over a model the client holds a lease on (a snapshot; training never changes it)."""

from __future__ import annotations

import random

import torch

from adapters.common.requests import check_sampling_params, check_token_ids
from adapters.common.stop_matcher import StopMatcher
from adapters.local.forward_pass import pad_token_id, vocab_size
from adapters.local.grouped_lora import adapter_layers
from adapters.local.lora_group import SampleJob
from adapters.local.mixture_sampler import sample_mixture
from adapters.local.prompt_detail import score_prompt_detail
from adapters.local.prompt_scoring import ScoreRequest, score_prompts
from adapters.local.request_batcher import DEFAULT_BATCH_LIMITS, BatchLimits, RequestBatcher, TurnBatcher
from adapters.local.sampler import Following, SampleRequest, sample_batch
from adapters.local.sampler_pool import ModelLease
from adapters.local.serial_executor import SerialExecutor
from adapters.local.shared_worker import Lane, LaneBatcher
from adapters.local.token_scoring import LogprobMethod
from adapters.local.vision import image_token_id
from kitchen.engine.errors import DataError
from kitchen.engine.ports import SamplingClient, Tokenizer, WeightFeed
from train_core.types import ModelInput, PromptDetail, PromptScores, SampleResult, SamplingParams, TokensWithLogprobs


class LocalSamplingClient:
    """Samples and scores with its own model on the backend's sampling thread.

    Requests made in the same event-loop turn (say, by one `asyncio.gather`) run together:
    `compute_logprobs` calls in one padded forward, `sample` calls with the same sampling params
    (seeds aside) in one KV-cache decode, within `batch_limits`. Each caller gets what it would
    get alone, up to float rounding (~1e-7); a seed draws the same samples.
    """

    def __init__(
        self,
        model: torch.nn.Module | ModelLease,
        tokenizer: Tokenizer,
        executor: SerialExecutor,
        seed: int,
        batch_limits: BatchLimits = DEFAULT_BATCH_LIMITS,
        logprob_method: LogprobMethod = "chunked",
        lane: Lane | None = None,
    ) -> None:
        """With `lane` (its training client's queue on a LoRA group's sampling worker), sample
        requests run there, batched with other clients' of the same base (`adapters.local.lora_group`)."""
        # The lease keeps the model from being reused by a newer snapshot while this client, or a
        # job it queued, is alive: the batchers' jobs reach the model only through it (and hold no
        # reference to this client, so dropping the client frees the lease at once).
        # A lazy lease (`SamplerPool.adapter_snapshot`) makes its model only when a job needs it.
        lease = model if isinstance(model, ModelLease) else ModelLease(model)
        self._lease = lease
        self._like = lease.template  # its config and vocabulary, never its weights
        self._tokenizer = tokenizer
        self._executor = executor
        self._context_length = int(getattr(lease.template.config, "max_position_embeddings", 2048))
        # Requests without a seed draw one from this stream: reproducible runs, distinct samples.
        self._seeds = random.Random(seed)
        pad_id = pad_token_id(tokenizer)
        self._scoring: RequestBatcher[ScoreRequest, list[float | None]] = RequestBatcher(
            executor, lambda requests: score_prompts(lease.model, requests, pad_id, logprob_method), batch_limits
        )
        self._sampling: TurnBatcher[SampleRequest, list[TokensWithLogprobs]]
        adapters = None if lane is None else lease.adapters or adapter_layers(lease.model)
        if lane is None or adapters is None:
            self._sampling = RequestBatcher(
                executor, lambda requests: sample_batch(lease.model, requests, pad_id), batch_limits
            )
        else:
            grouped = adapters  # the snapshot's adapters: the lease keeps them unchanged
            self._sampling = LaneBatcher(
                lane, lambda requests: SampleJob(lease, grouped, requests, pad_id), batch_limits
            )

    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def lease(self) -> ModelLease:
        """This client's hold on its weights (a following decode switching to them takes it too)."""
        return self._lease

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult:
        """`num_samples` continuations of `prompt`; the same seed gives the same samples.

        Without max_tokens, decoding runs until a stop condition or the model's context length.
        """
        return SampleResult(await self._sampling.submit(self._request(prompt, num_samples, sampling_params, None)))

    async def sample_following(
        self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams, feed: WeightFeed, version: int
    ) -> SampleResult:
        """As `sample`, switching to newer local weights published to `feed` between decode steps
        (re-prefilling the context under them); each token tagged with its version."""
        request = self._request(prompt, num_samples, sampling_params, Following(feed, version))
        return SampleResult(await self._sampling.submit(request))

    async def sample_mixture(
        self,
        prompt: ModelInput,
        num_samples: int,
        sampling_params: SamplingParams,
        reference: SamplingClient,
        mixture_coef: float,
    ) -> SampleResult:
        """`num_samples` continuations drawn token by token from the geometric mixture of this
        client's model and `reference`'s (another local sampling client), `mixture_coef` the
        reference's weight on the logit scale (`adapters.local.mixture_sampler`); the same seed
        gives the same samples."""
        if not isinstance(reference, LocalSamplingClient):
            raise DataError(
                f"sample_mixture mixes two local models; the reference is a {type(reference).__name__} "
                "(the local backend's vLLM sampler does not sample mixtures)"
            )
        if not 0.0 <= mixture_coef <= 1.0:
            raise DataError(f"mixture_coef {mixture_coef}: the geometric mixture's coefficient lies in [0, 1]")
        if prompt.images:
            raise DataError("sample_mixture samples text prompts; this prompt holds images")
        request = self._request(prompt, num_samples, sampling_params, None)
        lease, reference_lease = self._lease, reference.lease
        sequences = await self._executor.submit(
            lambda: sample_mixture(lease.model, reference_lease.model, request, mixture_coef)
        )
        return SampleResult(sequences)

    def _request(
        self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams, following: Following | None
    ) -> SampleRequest:
        check_sampling_params(num_samples, sampling_params)
        prompt_tokens = self._prompt_tokens(prompt)
        return SampleRequest(
            images=prompt.images,
            prompt=prompt_tokens,
            num_samples=num_samples,
            max_tokens=sampling_params.max_tokens or max(1, self._context_length - len(prompt_tokens)),
            seed=self._seeds.getrandbits(63) if sampling_params.seed is None else sampling_params.seed,
            params=sampling_params,
            stop=StopMatcher(sampling_params.stop, self._tokenizer),
            following=following,
        )

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        """The logprob of each prompt token given those before it; None for the first."""
        tokens = self._prompt_tokens(prompt)
        if len(tokens) == 1:
            return [None]
        return await self._scoring.submit(ScoreRequest(tokens, prompt.images))

    async def score_prompt(self, prompt: ModelInput, detail: PromptDetail) -> PromptScores:
        """The prompt's logprobs and, per position after the first, what `detail` asks for (top-k
        tokens, targets' logprobs, alternative draws): one forward pass of the prompt alone."""
        tokens = self._prompt_tokens(prompt)
        if prompt.images:
            raise DataError(
                "top-k, target and alternative-token prompt logprobs are computed for text prompts; "
                "this prompt holds images (compute_logprobs scores it)"
            )
        lease = self._lease
        return await self._executor.submit(lambda: score_prompt_detail(lease.model, tokens, detail))

    def _prompt_tokens(self, prompt: ModelInput) -> list[int]:
        """The prompt's ids, an image's positions holding the model's image token."""
        tokens = prompt.token_ids(image_token_id(self._like)) if prompt.images else prompt.to_ints()
        if not tokens:
            raise DataError("the prompt is empty; sampling and scoring need at least one token")
        check_token_ids(tokens, vocab_size(self._like), "prompt")
        return tokens
