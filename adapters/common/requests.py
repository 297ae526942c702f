"""Request checks both in-process backends make before any tensor work, so a bad request gets the
same clear error from either (torch would only crash, or silently sample nonsense)."""

from __future__ import annotations

from collections.abc import Sequence

from kitchen.engine.errors import ConfigError, DataError
from train_core.types import SamplingParams


def check_token_ids(tokens: Sequence[int], size: int, what: str) -> None:
    """A DataError naming `what` when a token id falls outside [0, size)."""
    if not tokens or (min(tokens) >= 0 and max(tokens) < size):
        return
    bad = [t for t in tokens if not 0 <= t < size]
    if bad:
        raise DataError(f"{what} has token ids {bad[:5]} outside the vocabulary [0, {size})")


MAX_TOPK = 1024
"""The most top-k logprobs a position reports (a sampled token's, or a prompt token's): beyond it the
answer is the size of the vocabulary times the sequence."""


def check_sampling_params(num_samples: int, params: SamplingParams) -> None:
    """A ConfigError naming the first sampling setting out of its range."""
    if num_samples < 1:
        raise ConfigError(f"num_samples must be >= 1, got {num_samples}")
    if params.temperature < 0:
        raise ConfigError(f"sampling temperature must be >= 0, got {params.temperature}")
    if params.top_k == 0 or params.top_k < -1:
        raise ConfigError(f"sampling top_k must be -1 (off) or >= 1, got {params.top_k}")
    if not 0.0 < params.top_p <= 1.0:
        raise ConfigError(f"sampling top_p must be in (0, 1], got {params.top_p}")
    if params.max_tokens is not None and params.max_tokens < 1:
        raise ConfigError(f"sampling max_tokens must be >= 1, got {params.max_tokens}")
    if not 0 <= params.topk_logprobs <= MAX_TOPK:
        raise ConfigError(f"sampling topk_logprobs must be in [0, {MAX_TOPK}], got {params.topk_logprobs}")
