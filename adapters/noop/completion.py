"""Pseudo-random completions for the noop sampler: realistic lengths, the local backend's stop rules.

Each completion has a seeded "natural length"; when it is reached the fake model emits its end
sequence (the first stop token id, or the tokens of the first stop string), so workflows see a mix
of "stop" and "length" endings as they would with a real model. Without stop conditions it runs
to max_tokens, as the local backend does. Every other token is drawn from the ordinary
(non-special) vocabulary: uniformly at the default sampling settings (temperature 1, no top-k or
top-p), otherwise from the pseudo-model's distribution over it, `softmax(logprob / temperature)`
cut to the top-k tokens and the top-p nucleus (the most likely token at temperature 0). Token
logprobs come from `pseudo_logprobs`, walking the same context states as `compute_logprobs` and
`forward`; asked for, each position also reports its top-k tokens under the pseudo-model.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Generator, Sequence

import numpy as np
import numpy.typing as npt
from transformers import PreTrainedTokenizerBase

from adapters.common.stop_matcher import StopMatcher
from adapters.noop.pseudo_logprobs import PseudoWeights, advance, hash_ints, next_logprobs_V, token_logprob
from kitchen.engine.ports import Tokenizer
from train_core.types import SamplingParams, TokensWithLogprobs

DEFAULT_PARAMS = SamplingParams()

MEAN_NATURAL_LENGTH = 24
"""Average completion length (tokens before the end sequence) when max_tokens does not cut it."""


def end_sequence(stop: Sequence[str] | Sequence[int] | None, tokenizer: Tokenizer) -> tuple[int, ...]:
    """What the fake model emits when it decides to end: the first stop condition, as tokens."""
    if not stop:
        return ()
    first = stop[0]
    return tuple(tokenizer.encode(first, add_special_tokens=False)) if isinstance(first, str) else (first,)


def ordinary_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Token ids that are not added/special tokens: what a completion's body is drawn from."""
    special = set(tokenizer.added_tokens_decoder) | set(tokenizer.all_special_ids)
    return [i for i in range(len(tokenizer)) if i not in special]


@functools.lru_cache(maxsize=8)
def _vocab_array(vocab_ids: tuple[int, ...]) -> npt.NDArray[np.uint64]:
    return np.asarray(vocab_ids, dtype=np.uint64)


def top_tokens(state: int, vocab_ids: Sequence[int], k: int) -> list[tuple[int, float]]:
    """The k most likely tokens of `vocab_ids` after `state` and their logprobs, most likely first."""
    logprobs_V = next_logprobs_V(state, _vocab_array(tuple(vocab_ids)))
    order = np.argsort(-logprobs_V, kind="stable")[:k]
    return [(int(vocab_ids[i]), float(logprobs_V[i])) for i in order]


def draw_token(state: int, vocab_ids: Sequence[int], params: SamplingParams, rng: random.Random) -> int:
    """One token after `state`: uniform over `vocab_ids` at the default settings, else from the
    tempered, truncated pseudo-distribution (greedy at temperature 0)."""
    if params.temperature == 1.0 and params.top_k == -1 and params.top_p == 1.0:
        return rng.choice(vocab_ids)
    return draw_from(next_logprobs_V(state, _vocab_array(tuple(vocab_ids))), vocab_ids, params, rng)


def draw_from(
    logprobs_V: npt.NDArray[np.floating], vocab_ids: Sequence[int], params: SamplingParams, rng: random.Random
) -> int:
    """One token of `vocab_ids` from `softmax(logprobs_V / temperature)` cut to the top-k tokens
    and the top-p nucleus (the most likely at temperature 0)."""
    logprobs_V = logprobs_V.astype(np.float64)
    if params.temperature == 0.0:
        return int(vocab_ids[int(np.argmax(logprobs_V))])
    scaled_V = logprobs_V / params.temperature
    order = np.argsort(-scaled_V, kind="stable")
    probs = np.exp(scaled_V[order] - scaled_V[order[0]])
    probs /= probs.sum()
    keep = len(order) if params.top_k < 1 else min(params.top_k, len(order))
    before = np.cumsum(probs) - probs  # mass of the better tokens: a token is kept while it is below top_p
    keep = min(keep, int(np.count_nonzero(before < params.top_p)))
    cdf = np.cumsum(probs[:keep])
    index = min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), keep - 1)
    return int(vocab_ids[int(order[index])])


def mixture_completion(
    weights: PseudoWeights,
    reference: PseudoWeights,
    mixture_coef: float,
    prompt_T: Sequence[int],
    sample_seed: int,
    max_tokens: int,
    end_T: Sequence[int],
    stop: StopMatcher,
    vocab_ids: Sequence[int],
    params: SamplingParams,
) -> TokensWithLogprobs:
    """One completion from the geometric mixture of two pseudo-models: each token (but the end
    sequence at the seeded natural length, as `decode_completion`) drawn from the mixed
    pseudo-logprobs `c * reference + (1 - c) * weights`, and reporting that mix of the two
    models' logprobs of it (at c = 0 the policy's own, at c = 1 the reference's)."""
    prompt_hash, state = _prompt_start(weights, tuple(prompt_T))
    _, reference_state = _prompt_start(reference, tuple(prompt_T))
    seed = 0 if params.temperature == 0.0 else sample_seed
    rng = random.Random(
        hash_ints([weights.initial_state(), reference.initial_state(), prompt_hash, seed & (2**64 - 1)])
    )
    natural_length = rng.randint(1, 2 * MEAN_NATURAL_LENGTH - 1)
    vocab_V = _vocab_array(tuple(vocab_ids))
    tokens_T: list[int] = []
    logprobs_T: list[float] = []
    while len(tokens_T) < max_tokens:
        position = len(tokens_T) - natural_length
        if 0 <= position < len(end_T):
            token = end_T[position]
        else:
            mixed_V = mixture_coef * next_logprobs_V(reference_state, vocab_V).astype(np.float64) + (
                1.0 - mixture_coef
            ) * next_logprobs_V(state, vocab_V).astype(np.float64)
            token = draw_from(mixed_V, vocab_ids, params, rng)
        mixed = mixture_coef * token_logprob(reference_state, token) + (1.0 - mixture_coef) * token_logprob(
            state, token
        )
        tokens_T.append(token)
        logprobs_T.append(mixed)
        state, reference_state = advance(state, token), advance(reference_state, token)
        if stop.is_done(tokens_T):
            return TokensWithLogprobs(tokens_T, logprobs_T, "stop")
    return TokensWithLogprobs(tokens_T, logprobs_T, "length")


class _Context:
    """The hash state of prompt + tokens so far under the current weights; switching weights
    re-walks the context under the new ones (a re-prefill), so later logprobs are exactly theirs.
    With `topk`, each appended token also records the top-k tokens of its position."""

    def __init__(
        self, weights: PseudoWeights, prompt_T: Sequence[int], topk: int = 0, vocab_ids: Sequence[int] = ()
    ) -> None:
        self.weights = weights
        self.prompt_T = tuple(prompt_T)
        self.tokens_T: list[int] = []
        self.logprobs_T: list[float] = []
        self.topk = topk
        self.vocab_ids = vocab_ids
        self.topk_T: list[list[tuple[int, float]]] = []
        _, self.state = _prompt_start(weights, self.prompt_T)

    def use(self, weights: PseudoWeights) -> None:
        if weights is not self.weights and weights != self.weights:
            self.weights = weights
            _, self.state = _prompt_start(weights, self.prompt_T)
            for token in self.tokens_T:
                self.state = advance(self.state, token)

    def done(self, reason: str) -> TokensWithLogprobs:
        topk = self.topk_T if self.topk > 0 else None
        return TokensWithLogprobs(self.tokens_T, self.logprobs_T, "stop" if reason == "stop" else "length", None, topk)

    def append(self, token: int) -> None:
        if self.topk > 0:
            self.topk_T.append(top_tokens(self.state, self.vocab_ids, self.topk))
        self.tokens_T.append(token)
        self.logprobs_T.append(token_logprob(self.state, token))
        self.state = advance(self.state, token)


@functools.lru_cache(maxsize=64)
def _prompt_start(weights: PseudoWeights, prompt_T: tuple[int, ...]) -> tuple[int, int]:
    """The prompt's hash (it seeds each completion) and the context state after it: the same for
    every completion of a prompt (a sample call makes `num_samples`), so computed once."""
    state = weights.initial_state()
    for token in prompt_T:
        state = advance(state, token)
    return hash_ints(prompt_T), state


Decoder = Generator[None, PseudoWeights, TokensWithLogprobs]
"""A completion decoded one token per `send(weights)` (the weights that token is decoded with),
primed with `next`; it returns its `TokensWithLogprobs` (StopIteration) once done, so a caller
can spread the decode over time and switch weights between tokens (in-flight weight updates)."""


def decode_completion(
    weights: PseudoWeights,
    prompt_T: Sequence[int],
    sample_seed: int,
    max_tokens: int,
    end_T: Sequence[int],
    stop: StopMatcher,
    vocab_ids: Sequence[int],
    params: SamplingParams = DEFAULT_PARAMS,
) -> Decoder:
    """One pseudo-random completion of `prompt_T`, a pure function of its arguments and of the
    weights sent for each token; the draws stay those of the first weights' seed (but for a
    tempered or truncated draw, which reads the current weights' distribution). The token that
    meets a stop condition is kept, as the local and Tinker samplers keep it."""
    prompt_hash, _ = _prompt_start(weights, tuple(prompt_T))
    if params.temperature == 0.0:  # greedy: every sample the same, its ending included
        sample_seed = 0
    rng = random.Random(hash_ints([weights.initial_state(), prompt_hash, sample_seed & (2**64 - 1)]))
    natural_length = rng.randint(1, 2 * MEAN_NATURAL_LENGTH - 1)
    context = _Context(weights, prompt_T, params.topk_logprobs, vocab_ids)
    while len(context.tokens_T) < max_tokens:
        context.use((yield))
        position = len(context.tokens_T) - natural_length
        ending = 0 <= position < len(end_T)
        context.append(end_T[position] if ending else draw_token(context.state, vocab_ids, params, rng))
        if stop.is_done(context.tokens_T):
            return context.done("stop")
    return context.done("length")


def decode_scripted(
    weights: PseudoWeights,
    prompt_T: Sequence[int],
    reply_T: Sequence[int],
    max_tokens: int,
    end_T: Sequence[int],
    stop: StopMatcher,
    topk: int = 0,
    vocab_ids: Sequence[int] = (),
) -> Decoder:
    """A scripted reply: `reply_T` then the end sequence, cut at `max_tokens` or at the first stop
    condition met, with the pseudo-model's logprobs of those tokens (as `decode_completion`)."""
    context = _Context(weights, prompt_T, topk, vocab_ids)
    for token in [*reply_T, *end_T][:max_tokens]:
        context.use((yield))
        context.append(token)
        if stop.is_done(context.tokens_T):
            return context.done("stop")
    return context.done("length")


def primed(decoder: Decoder) -> Decoder:
    next(decoder)
    return decoder


def step(decoder: Decoder, weights: PseudoWeights) -> TokensWithLogprobs | None:
    """Decode one token with `weights`; the completion once it is done, else None."""
    try:
        decoder.send(weights)
    except StopIteration as done:
        result: TokensWithLogprobs = done.value
        return result
    return None


def run_primed(decoder: Decoder, weights: PseudoWeights) -> TokensWithLogprobs:
    """The whole completion of a primed decoder, every token decoded with `weights`."""
    while (result := step(decoder, weights)) is None:
        pass
    return result


def generate_completion(
    weights: PseudoWeights,
    prompt_T: Sequence[int],
    sample_seed: int,
    max_tokens: int,
    end_T: Sequence[int],
    stop: StopMatcher,
    vocab_ids: Sequence[int],
) -> TokensWithLogprobs:
    """One completion of `prompt_T` with fixed weights (see `decode_completion`)."""
    decoder = decode_completion(weights, prompt_T, sample_seed, max_tokens, end_T, stop, vocab_ids)
    return run_primed(primed(decoder), weights)


def scripted_completion(
    weights: PseudoWeights,
    prompt_T: Sequence[int],
    reply_T: Sequence[int],
    max_tokens: int,
    end_T: Sequence[int],
    stop: StopMatcher,
) -> TokensWithLogprobs:
    """A scripted reply with fixed weights (see `decode_scripted`)."""
    return run_primed(primed(decode_scripted(weights, prompt_T, reply_T, max_tokens, end_T, stop)), weights)
