"""The noop sampler: seeded pseudo-random completions from frozen pseudo-weights."""

from __future__ import annotations

import asyncio
import functools
import random
from dataclasses import dataclass, replace
from typing import cast

import numpy as np

from adapters.common.requests import check_sampling_params, check_token_ids
from adapters.common.stop_matcher import StopMatcher
from adapters.common.tiny import TINY_MODEL_NAME
from adapters.common.tokenizer import load_tokenizer
from adapters.noop.completion import (
    Decoder,
    decode_completion,
    decode_scripted,
    end_sequence,
    mixture_completion,
    primed,
    run_primed,
    step,
    top_tokens,
)
from adapters.noop.pseudo_logprobs import (
    PseudoWeights,
    advance,
    hash_ints,
    next_logprobs_V,
    prompt_logprobs,
    token_logprob,
)
from adapters.noop.runtime import NOOP_IMAGE_TOKEN, NoopRuntime, tiny_tokenizer, tiny_vocab_ids, vocab_size
from kitchen.engine.errors import DataError
from kitchen.engine.ports import SamplingClient, WeightFeed
from train_core.types import (
    ModelInput,
    PromptDetail,
    PromptScores,
    SampleResult,
    SamplingParams,
    StopCondition,
    TokensWithLogprobs,
)

_SEEDED, _UNSEEDED = 1, 0  # keep explicit seeds and call counters from ever colliding

FEED_CHECKS = 64
"""How often at most a following call looks for new weights (evenly over its tokens), so a long
budget costs no more event-loop turns than a short one."""


def _prompt_tokens(prompt: ModelInput) -> list[int]:
    """The prompt's tokens, checked as the local backend checks them (non-empty, in the vocabulary)."""
    tokens_T = prompt.token_ids(NOOP_IMAGE_TOKEN)
    if not tokens_T:
        raise DataError("the prompt is empty; sampling and scoring need at least one token")
    check_token_ids(tokens_T, vocab_size(), "prompt")
    return tokens_T


@functools.lru_cache(maxsize=256)
def _end_sequence(stop: tuple[str, ...] | tuple[int, ...]) -> tuple[int, ...]:
    """`end_sequence` of the tiny tokenizer, encoded once per stop condition (a run's sample
    calls all pass the same few)."""
    return end_sequence(stop, load_tokenizer(TINY_MODEL_NAME))


@functools.lru_cache(maxsize=256)
def _stop_matcher(stop: tuple[str, ...] | tuple[int, ...]) -> StopMatcher:
    """The tiny tokenizer's matcher for `stop`, built once per stop condition (it holds no state
    of a call)."""
    return StopMatcher(cast(StopCondition, list(stop)), load_tokenizer(TINY_MODEL_NAME))


@dataclass(frozen=True)
class _SampleCall:
    """One checked sample call: everything its completions are a function of, but the weights."""

    client: NoopSamplingClient
    prompt_T: list[int]
    num_samples: int
    max_tokens: int
    call_seed: int
    stop: StopMatcher
    end_T: tuple[int, ...]
    params: SamplingParams

    def decoders(self) -> list[Decoder]:
        """One primed decoder per sample (see `adapters.noop.completion.Decoder`)."""
        weights, runtime = self.client.weights, self.client.runtime
        if runtime.replies is not None:
            tokenizer = load_tokenizer(TINY_MODEL_NAME)
            reply_T = tokenizer.encode(runtime.replies(tokenizer.decode(self.prompt_T)), add_special_tokens=False)
            return [
                primed(
                    decode_scripted(
                        weights,
                        self.prompt_T,
                        reply_T,
                        self.max_tokens,
                        self.end_T,
                        self.stop,
                        self.params.topk_logprobs,
                        tiny_vocab_ids(),
                    )
                )
                for _ in range(self.num_samples)
            ]
        return [
            primed(
                decode_completion(
                    weights,
                    self.prompt_T,
                    hash_ints([self.call_seed, i]),
                    self.max_tokens,
                    self.end_T,
                    self.stop,
                    tiny_vocab_ids(),
                    self.params,
                )
            )
            for i in range(self.num_samples)
        ]

    def result(self, sequences: list[TokensWithLogprobs]) -> SampleResult:
        shift = self.client.runtime.sampler_logprob_shift
        if shift:
            sequences = [replace(seq, maybe_logprobs=[lp + shift for lp in seq.logprobs]) for seq in sequences]
        return SampleResult(sequences)


class NoopSamplingClient:
    """Samples and scores with fixed weights: later training never changes what it returns.

    Without `SamplingParams.seed`, each call draws from this client's call counter, so repeated
    calls differ while runs stay reproducible. Temperature, top-k and top-p shape the draws as
    `adapters.noop.completion` describes (temperature 0 is greedy).
    """

    def __init__(self, runtime: NoopRuntime, weights: PseudoWeights) -> None:
        self.runtime = runtime
        self.weights = weights
        self.client_id = runtime.new_client_id("sampling")
        self._unseeded_calls = 0

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult:
        """`num_samples` completions; arguments are checked and stop conditions matched exactly as
        the local backend does, so a workflow that runs here runs there."""
        call = self._start_call(prompt, num_samples, sampling_params)
        started = asyncio.get_running_loop().time()
        # the simulated decode is part of the call's latency
        sequences = [run_primed(decoder, self.weights) for decoder in call.decoders()]
        await self.runtime.latency.pad("sample", started)
        return call.result(sequences)

    async def sample_following(
        self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams, feed: WeightFeed, version: int
    ) -> SampleResult:
        """As `sample`, with the simulated decode spread evenly over the call's latency: token i of
        n is decoded at (i + 1) / (n + 1) of it (none at the request itself, as an engine's first
        token comes after its prefill) with the newest noop weights published to `feed` by then
        (the context re-walked under them, so its logprob is exactly theirs) and tagged with their
        version."""
        call = self._start_call(prompt, num_samples, sampling_params)
        decoders: list[Decoder] = []
        done: list[TokensWithLogprobs | None] = [None] * num_samples
        versions_T: list[int] = []
        current = (version, self.weights)
        loop = asyncio.get_running_loop()
        started, seconds = loop.time(), self.runtime.latency.seconds("sample")
        stride = -(-call.max_tokens // FEED_CHECKS)
        for index in range(call.max_tokens):
            if index % stride == 0:
                turn = started + seconds * (index + 1) / (call.max_tokens + 1)
                await asyncio.sleep(max(0.0, turn - loop.time()))
                newest, client = feed.latest()
                if newest > current[0] and isinstance(client, NoopSamplingClient):
                    current = (newest, client.weights)
                if index == 0:  # primed at the first token's turn, not at the request
                    decoders = call.decoders()
            versions_T.append(current[0])
            for row, decoder in enumerate(decoders):
                if done[row] is None:
                    done[row] = step(decoder, current[1])
            if all(result is not None for result in done):
                break
        await self.runtime.latency.pad("sample", started)
        sequences = [result for result in done if result is not None]
        return call.result([replace(seq, maybe_versions=versions_T[: len(seq.tokens)]) for seq in sequences])

    async def sample_mixture(
        self,
        prompt: ModelInput,
        num_samples: int,
        sampling_params: SamplingParams,
        reference: SamplingClient,
        mixture_coef: float,
    ) -> SampleResult:
        """`num_samples` completions from the geometric mixture of these pseudo-weights and
        `reference`'s (another noop client), `mixture_coef` the reference's weight
        (`adapters.noop.completion.mixture_completion`); checked as the local backend checks."""
        if not isinstance(reference, NoopSamplingClient):
            raise DataError(f"sample_mixture mixes two noop models; the reference is a {type(reference).__name__}")
        if not 0.0 <= mixture_coef <= 1.0:
            raise DataError(f"mixture_coef {mixture_coef}: the geometric mixture's coefficient lies in [0, 1]")
        call = self._start_call(prompt, num_samples, sampling_params, "sample_mixture")
        started = asyncio.get_running_loop().time()
        sequences = [
            mixture_completion(
                self.weights,
                reference.weights,
                mixture_coef,
                call.prompt_T,
                hash_ints([call.call_seed, i]),
                call.max_tokens,
                call.end_T,
                call.stop,
                tiny_vocab_ids(),
                sampling_params,
            )
            for i in range(num_samples)
        ]
        await self.runtime.latency.pad("sample", started)
        return call.result(sequences)

    def _start_call(
        self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams, method: str = "sample"
    ) -> _SampleCall:
        """Check and record a sample call (as `method`), and resolve what its completions depend on."""
        check_sampling_params(num_samples, sampling_params)
        prompt_T = _prompt_tokens(prompt)
        context_length = tiny_tokenizer().model_max_length  # without max_tokens, run this far, as local does
        if sampling_params.seed is None:
            call_seed = hash_ints([_UNSEEDED, self._unseeded_calls])
            self._unseeded_calls += 1
        else:
            call_seed = hash_ints([_SEEDED, sampling_params.seed])
        self.runtime.record(
            "sampling",
            method,
            self.client_id,
            version=self.weights.version,
            prompt_tokens=prompt.length,
            num_samples=num_samples,
            max_tokens=sampling_params.max_tokens,
        )
        return _SampleCall(
            self,
            prompt_T,
            num_samples,
            sampling_params.max_tokens or max(1, context_length - len(prompt_T)),
            call_seed,
            _stop_matcher(tuple(sampling_params.stop or ())),
            _end_sequence(tuple(sampling_params.stop or ())),
            sampling_params,
        )

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        prompt_T = _prompt_tokens(prompt)
        self.runtime.record(
            "sampling", "compute_logprobs", self.client_id, version=self.weights.version, prompt_tokens=prompt.length
        )
        started = asyncio.get_running_loop().time()
        logprobs = prompt_logprobs(self.weights, prompt_T)
        await self.runtime.latency.pad("compute_logprobs", started)
        return logprobs

    async def score_prompt(self, prompt: ModelInput, detail: PromptDetail) -> PromptScores:
        """The prompt's logprobs and, at each position after the first, what `detail` asks for,
        under the pseudo-model (its distribution over the tiny vocabulary)."""
        prompt_T = _prompt_tokens(prompt)
        self.runtime.record(
            "sampling", "score_prompt", self.client_id, version=self.weights.version, prompt_tokens=prompt.length
        )
        started = asyncio.get_running_loop().time()
        scores = _prompt_scores(self.weights, prompt_T, detail)
        await self.runtime.latency.pad("compute_logprobs", started)
        return scores


def _prompt_scores(weights: PseudoWeights, prompt_T: list[int], detail: PromptDetail) -> PromptScores:
    vocab = tiny_vocab_ids()
    topk: list[list[tuple[int, float]]] = []
    targets: list[list[float | None]] = []
    alt_tokens: list[list[int]] = []
    alt_logprobs: list[list[float]] = []
    rng = random.Random(hash_ints([weights.initial_state(), detail.seed & (2**64 - 1)]))
    vocab_V = np.asarray(vocab, dtype=np.uint64)
    state = weights.initial_state()
    for position, token in enumerate(prompt_T[:-1]):
        state = advance(state, token)
        if detail.topk > 0:
            topk.append(top_tokens(state, vocab, detail.topk))
        if detail.targets is not None:
            row = detail.targets[position]
            targets.append([None if t < 0 else token_logprob(state, t) for t in row])
        if detail.alt_k > 0:
            drawn = _alternatives(state, vocab, vocab_V, detail, rng)
            alt_tokens.append([t for t, _ in drawn])
            alt_logprobs.append([lp for _, lp in drawn])
    return PromptScores(
        logprobs=prompt_logprobs(weights, prompt_T),
        topk=topk if detail.topk > 0 else None,
        targets=targets if detail.targets is not None else None,
        alt_tokens=alt_tokens if detail.alt_k > 0 else None,
        alt_logprobs=alt_logprobs if detail.alt_k > 0 else None,
    )


def _alternatives(
    state: int, vocab: tuple[int, ...], vocab_V: np.ndarray, detail: PromptDetail, rng: random.Random
) -> list[tuple[int, float]]:
    """`alt_k` independent draws from `softmax(logprob / temperature)` over the vocabulary (the
    argmax at temperature 0), each with its logprob under that distribution."""
    logprobs_V = next_logprobs_V(state, vocab_V).astype(np.float64)
    if detail.temperature == 0.0:
        best = int(np.argmax(logprobs_V))
        return [(vocab[best], 0.0)] * detail.alt_k
    scaled_V = logprobs_V / detail.temperature
    log_norm = float(np.log(np.exp(scaled_V - scaled_V.max()).sum()) + scaled_V.max())
    cdf_V = np.cumsum(np.exp(scaled_V - log_norm))
    drawn = []
    for _ in range(detail.alt_k):
        index = min(int(np.searchsorted(cdf_V, rng.random() * cdf_V[-1], side="right")), len(vocab) - 1)
        drawn.append((vocab[index], float(scaled_V[index] - log_norm)))
    return drawn
