"""SamplingClient on the vLLM engine: the same contract as kitchen's sampler, served by vLLM.

A client is a snapshot of weights, as kitchen's are: full weights (a version the engine loads
before serving the client, if it holds another; its shared-memory segment lives as long as the
client) or the base weights with a LoRA adapter applied per request. Requests made in one
event-loop turn go to the engine in one call, where vLLM batches them (and shares each prompt's
prefix among its `num_samples`).

Contract, as kitchen's sampler: logprobs of the sampled tokens under the temperature-scaled
distribution (at temperature 1 the training logprobs, up to float rounding), the token that
triggers a stop kept, no stop at EOS unless asked, a seed draws the same samples again. Two
differences: with top-k / top-p the logprobs are those of the truncated, renormalised
distribution vLLM draws from (kitchen's are taken before truncation), and a seed draws other
samples than kitchen's sampler does with the same seed.
"""

from __future__ import annotations

import random

from adapters.common.requests import check_sampling_params, check_token_ids
from adapters.common.stop_matcher import StopMatcher
from adapters.local.request_batcher import BatchLimits, RequestBatcher
from adapters.local.serial_executor import SerialExecutor
from adapters.local.vllm_engine import FullWeights, VllmEngine
from adapters.local.vllm_protocol import Completion, EngineInfo, GenerateRequest, LoraAdapter, ScoreRequest
from kitchen.engine.errors import DataError
from kitchen.engine.ports import Tokenizer
from train_core.types import ModelInput, SampleResult, SamplingParams, TokensWithLogprobs

ENGINE_BATCH = BatchLimits(max_sequences=4096, max_tokens=1 << 30)
"""One engine call per event-loop turn (up to 4096 sequences): vLLM schedules its memory itself."""


class VllmSamplingClient:
    """Samples and scores with `weights` (and `lora`, if any) on the shared engine."""

    def __init__(
        self,
        engine: VllmEngine,
        info: EngineInfo,
        weights: FullWeights,
        lora: LoraAdapter | None,
        tokenizer: Tokenizer,
        executor: SerialExecutor,
        seed: int,
        weight_sync_s: float | None = None,
    ) -> None:
        self._engine = engine
        self._info = info
        self._tokenizer = tokenizer
        self._lora = lora
        self.weight_sync_s = weight_sync_s
        """Seconds it took to move these weights into the engine, when they were new to it
        (RL reports it as `time/weight_sync`)."""
        # Requests without a seed draw one from this stream: reproducible runs, distinct samples.
        self._seeds = random.Random(seed)
        self._sampling: RequestBatcher[GenerateRequest, list[Completion]] = RequestBatcher(
            executor, lambda requests: engine.generate(weights, requests), ENGINE_BATCH
        )
        self._scoring: RequestBatcher[ScoreRequest, list[float | None]] = RequestBatcher(
            executor, lambda requests: engine.score(weights, requests), ENGINE_BATCH
        )

    @property
    def engine(self) -> VllmEngine:
        """The engine serving this client (shared with the backend's other vLLM clients)."""
        return self._engine

    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult:
        """`num_samples` continuations of `prompt`; the same seed gives the same samples.

        Without max_tokens, decoding runs until a stop condition or the engine's context length.
        """
        check_sampling_params(num_samples, sampling_params)
        StopMatcher(sampling_params.stop, self._tokenizer)  # the same checks of the stop condition
        tokens = self._prompt_tokens(prompt)
        room = self._info.max_model_len - len(tokens)
        if room < 1:
            raise DataError(
                f"the prompt has {len(tokens)} tokens; the vLLM engine serves at most {self._info.max_model_len} "
                "tokens of prompt and completion (local.vllm.max_model_len)"
            )
        request = GenerateRequest(
            prompt=tokens,
            num_samples=num_samples,
            max_tokens=min(sampling_params.max_tokens or room, room),
            seed=self._seeds.getrandbits(63) if sampling_params.seed is None else sampling_params.seed,
            params=sampling_params,
            lora=self._lora,
        )
        completions = await self._sampling.submit(request)
        return SampleResult(
            [TokensWithLogprobs(c.tokens, c.logprobs, c.stop_reason, None, c.topk) for c in completions]
        )

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        """The logprob of each prompt token given those before it; None for the first."""
        tokens = self._prompt_tokens(prompt)
        if len(tokens) == 1:
            return [None]
        if len(tokens) > self._info.max_model_len:
            raise DataError(
                f"cannot score {len(tokens)} tokens: the vLLM engine serves at most {self._info.max_model_len}"
            )
        return await self._scoring.submit(ScoreRequest(tokens, self._lora))

    def _prompt_tokens(self, prompt: ModelInput) -> list[int]:
        tokens = prompt.to_ints()
        if not tokens:
            raise DataError("the prompt is empty; sampling and scoring need at least one token")
        check_token_ids(tokens, self._info.vocab_size, "prompt")
        return tokens
