"""The noop sampler: seeded pseudo-random completions from frozen pseudo-weights."""

from __future__ import annotations

from dataclasses import replace

from adapters.common.requests import check_sampling_params, check_token_ids
from adapters.common.stop_matcher import StopMatcher
from adapters.common.tiny import TINY_MODEL_NAME
from adapters.common.tokenizer import load_tokenizer
from adapters.noop.completion import end_sequence, generate_completion, scripted_completion
from adapters.noop.pseudo_logprobs import PseudoWeights, hash_ints, prompt_logprobs
from adapters.noop.runtime import NOOP_IMAGE_TOKEN, NoopRuntime, tiny_tokenizer, tiny_vocab_ids, vocab_size
from kitchen.errors import DataError
from train_core.types import ModelInput, SampleResult, SamplingParams

_SEEDED, _UNSEEDED = 1, 0  # keep explicit seeds and call counters from ever colliding


def _prompt_tokens(prompt: ModelInput) -> list[int]:
    """The prompt's tokens, checked as the local backend checks them (non-empty, in the vocabulary)."""
    tokens_T = prompt.token_ids(NOOP_IMAGE_TOKEN)
    if not tokens_T:
        raise DataError("the prompt is empty; sampling and scoring need at least one token")
    check_token_ids(tokens_T, vocab_size(), "prompt")
    return tokens_T


class NoopSamplingClient:
    """Samples and scores with fixed weights: later training never changes what it returns.

    Without `SamplingParams.seed`, each call draws from this client's call counter, so repeated
    calls differ while runs stay reproducible. Temperature, top-k and top-p are not modelled.
    """

    def __init__(self, runtime: NoopRuntime, weights: PseudoWeights) -> None:
        self.runtime = runtime
        self.weights = weights
        self.client_id = runtime.new_client_id("sampling")
        self._unseeded_calls = 0

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult:
        """`num_samples` completions; arguments are checked and stop conditions matched exactly as
        the local backend does, so a workflow that runs here runs there."""
        check_sampling_params(num_samples, sampling_params)
        prompt_T = _prompt_tokens(prompt)
        tokenizer = load_tokenizer(TINY_MODEL_NAME)
        stop = StopMatcher(sampling_params.stop, tokenizer)
        end_T = end_sequence(sampling_params.stop, tokenizer)
        context_length = tiny_tokenizer().model_max_length  # without max_tokens, run this far, as local does
        max_tokens = sampling_params.max_tokens or max(1, context_length - len(prompt_T))
        if sampling_params.seed is None:
            call_seed = hash_ints([_UNSEEDED, self._unseeded_calls])
            self._unseeded_calls += 1
        else:
            call_seed = hash_ints([_SEEDED, sampling_params.seed])
        self.runtime.record(
            "sampling",
            "sample",
            self.client_id,
            version=self.weights.version,
            prompt_tokens=prompt.length,
            num_samples=num_samples,
            max_tokens=sampling_params.max_tokens,
        )
        await self.runtime.latency.wait("sample")
        if self.runtime.replies is not None:
            reply_T = tokenizer.encode(self.runtime.replies(tokenizer.decode(prompt_T)), add_special_tokens=False)
            sequences = [
                scripted_completion(self.weights, prompt_T, reply_T, max_tokens, end_T, stop)
                for _ in range(num_samples)
            ]
        else:
            sequences = [
                generate_completion(
                    self.weights, prompt_T, hash_ints([call_seed, i]), max_tokens, end_T, stop, tiny_vocab_ids()
                )
                for i in range(num_samples)
            ]
        shift = self.runtime.sampler_logprob_shift
        if shift:
            sequences = [replace(seq, maybe_logprobs=[lp + shift for lp in seq.logprobs]) for seq in sequences]
        return SampleResult(sequences)

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        prompt_T = _prompt_tokens(prompt)
        self.runtime.record(
            "sampling", "compute_logprobs", self.client_id, version=self.weights.version, prompt_tokens=prompt.length
        )
        await self.runtime.latency.wait("compute_logprobs")
        return prompt_logprobs(self.weights, prompt_T)
