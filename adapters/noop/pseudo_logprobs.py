"""The noop backend's stand-in for a language model: seeded, hash-derived logprobs.

A "model" is a `PseudoWeights` (seed, base model, weights version). The logprob of a token after
a context is a hash of (weights, context, token) mapped into [-8, -0.05]. The context is folded
into a running 64-bit state one token at a time, so scoring a whole sequence is linear in its
length, and sampling, `compute_logprobs` and `forward` agree exactly because they all walk the
same states. Bumping the version (an optimizer step) changes every logprob.

The hash runs on Python ints (the sampler, one token at a time) and on numpy uint64 arrays
(scoring, one position of a whole padded batch at a time): the same expressions, since uint64
arithmetic wraps exactly as the masked int arithmetic does. Scoring a batch thus costs a few
numpy operations per position instead of a Python call per token, which keeps the noop client's
own CPU time (on the event loop, never overlapped) small next to the latency it simulates.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

_MASK64 = (1 << 64) - 1
_GOLDEN64 = 0x9E3779B97F4A7C15
_TOKEN_SALT = 0xD6E8FEB86659FD93

LOGPROB_MAX = -0.05
LOGPROB_MIN = -8.0

Hashes = npt.NDArray[np.integer[Any]]  # uint64 at run time; numpy's stubs widen uint64-with-int results
H = TypeVar("H", int, Hashes)
"""A 64-bit hash state: one Python int, or a uint64 array of them (one per sequence of a batch)."""


def mix64(value: H) -> H:
    """The splitmix64 finaliser: a cheap, well-spread, process-independent 64-bit hash."""
    z = (value + _GOLDEN64) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def hash_ints(values: Sequence[int]) -> int:
    """Fold non-negative ints into one 64-bit hash (order-sensitive)."""
    state = mix64(len(values))
    for value in values:
        state = mix64(state ^ (value & _MASK64))
    return state


def hash_text(text: str) -> int:
    """A stable hash of a string (Python's `hash` is salted per process, so it will not do)."""
    return hash_ints(list(text.encode("utf-8")))


def unit_float(state: H) -> float | npt.NDArray[np.float64]:
    """Map a 64-bit hash (or an array of them) to [0, 1) using its top 53 bits."""
    return (state >> 11) / float(1 << 53)


def _unrounded_logprob(state: H, token: H) -> float | npt.NDArray[np.float64]:
    """The float64 logprob of `token` after `state`. Squaring the uniform draw skews values
    towards LOGPROB_MAX, as real next-token logprobs are."""
    u = unit_float(mix64(state ^ (token ^ _TOKEN_SALT)))
    return LOGPROB_MAX - (LOGPROB_MAX - LOGPROB_MIN) * u * u


@dataclass(frozen=True)
class PseudoWeights:
    """The identity of a set of pseudo-weights: what every logprob is a function of."""

    seed: int
    base_model: str
    version: int = 0

    def bumped(self) -> PseudoWeights:
        """The weights after one more optimizer step."""
        return PseudoWeights(self.seed, self.base_model, self.version + 1)

    def initial_state(self) -> int:
        """The hash state before any context token (cached: every completion and batch starts here)."""
        return _initial_state(self)


@functools.lru_cache(maxsize=64)
def _initial_state(weights: PseudoWeights) -> int:
    return hash_ints([weights.seed & _MASK64, hash_text(weights.base_model), weights.version])


def advance(state: int, token: int) -> int:
    """The context state after appending `token`."""
    return mix64(state ^ (token & _MASK64))


def token_logprob(state: int, token: int) -> float:
    """Logprob of `token` after the context summarised by `state`, in [LOGPROB_MIN, LOGPROB_MAX].

    Values are rounded to float32, so they survive a trip through a float32 `TensorData` unchanged.
    """
    return float(struct.unpack("f", struct.pack("f", _unrounded_logprob(state, token & _MASK64)))[0])


def next_logprobs_V(state: int, vocab_V: npt.NDArray[np.uint64]) -> npt.NDArray[np.float32]:
    """The logprob of every token of `vocab_V` after the context `state` (as `token_logprob`
    gives each, float32-rounded): the pseudo-model's whole next-token distribution."""
    states_V = np.full(vocab_V.shape, state, dtype=np.uint64)
    return np.asarray(_unrounded_logprob(states_V, vocab_V), dtype=np.float64).astype(np.float32)


def target_logprobs_BL(
    weights: PseudoWeights, input_ids_BL: npt.ArrayLike, targets_BL: npt.ArrayLike
) -> npt.NDArray[np.float32]:
    """Logprob of each `targets_BL[b, t]` given `input_ids_BL[b, : t + 1]`, for a right-padded batch
    of token ids (>= 0): exactly `token_logprob` along `advance`d states, one position of every row
    at a time. Positions past a row's real length hold meaningless values; callers drop them."""
    inputs_BL = np.asarray(input_ids_BL, dtype=np.uint64)
    targets = np.asarray(targets_BL, dtype=np.uint64)
    if inputs_BL.ndim != 2 or inputs_BL.shape != targets.shape:
        raise ValueError(f"need two [B, L] arrays of the same shape, got {inputs_BL.shape} and {targets.shape}")
    logprobs_BL = np.empty(inputs_BL.shape, dtype=np.float64)
    state_B: Hashes = np.full(inputs_BL.shape[0], weights.initial_state(), dtype=np.uint64)
    for t in range(inputs_BL.shape[1]):
        state_B = mix64(state_B ^ inputs_BL[:, t])
        logprobs_BL[:, t] = _unrounded_logprob(state_B, targets[:, t])
    return logprobs_BL.astype(np.float32)  # round to nearest, as token_logprob's struct round trip does


def target_logprobs(weights: PseudoWeights, input_T: Sequence[int], target_T: Sequence[int]) -> list[float]:
    """Logprob of each `target_T[t]` given `input_T[: t + 1]` (the training-forward layout)."""
    if len(input_T) != len(target_T):
        raise ValueError(f"{len(input_T)} input tokens but {len(target_T)} targets")
    return [float(v) for v in target_logprobs_BL(weights, [list(input_T)], [list(target_T)])[0]]


def prompt_logprobs(weights: PseudoWeights, tokens_T: Sequence[int]) -> list[float | None]:
    """Logprob of each token given the ones before it; the first has no context, hence None."""
    if not tokens_T:
        return []
    return [None, *target_logprobs(weights, tokens_T[:-1], tokens_T[1:])]
