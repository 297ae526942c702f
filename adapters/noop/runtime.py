"""What the noop backend and its clients share: seed, latency, saves, call log, tokenizer."""

from __future__ import annotations

import functools
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedTokenizerBase

from adapters.common.tiny import TINY_MODEL_NAME, TINY_VL_MODEL_NAME
from adapters.common.tokenizer import load_tokenizer
from adapters.noop.call_log import ClientKind, NoopCall
from adapters.noop.checkpoint_store import CheckpointStore
from adapters.noop.completion import ordinary_token_ids
from adapters.noop.latency import Latency


def tiny_tokenizer() -> PreTrainedTokenizerBase:
    """The embedded tiny model's tokenizer (loaded once, by the local adapter's loader): the noop
    backend's tokenizer for every base model name."""
    tokenizer = load_tokenizer(TINY_MODEL_NAME)
    assert isinstance(tokenizer, PreTrainedTokenizerBase)  # the tiny model's is a HF fast tokenizer
    return tokenizer


NOOP_IMAGE_TOKEN = 0
"""What an image's positions hold in the noop backend's token ids (it has no vision encoder: an
image is its positions, as any token run)."""


@functools.cache
def vocab_size() -> int:
    """The ids the noop backend accepts: the tiny tokenizer's and the vision tokens `tiny-vl`'s adds
    (counted once: the tokenizers are fixed)."""
    tokenizer = load_tokenizer(TINY_VL_MODEL_NAME)
    assert isinstance(tokenizer, PreTrainedTokenizerBase)
    return len(tokenizer)


@functools.cache
def tiny_vocab_ids() -> tuple[int, ...]:
    """The tiny tokenizer's ordinary token ids (computed once; sampling draws from them)."""
    return tuple(ordinary_token_ids(tiny_tokenizer()))


@dataclass
class NoopRuntime:
    """State shared by one backend and every client it creates."""

    seed: int
    latency: Latency
    store: CheckpointStore
    calls: list[NoopCall] = field(default_factory=list)
    replies: Callable[[str], str] | None = None
    """A script of the fake model's replies (prompt text -> reply text); None = pseudo-random."""
    sampler_logprob_shift: float = 0.0
    """Added to the logprobs the sampler reports with each sampled token (not to the trainer's):
    a sampler/trainer mismatch of known size, for off-policy corrections and mismatch metrics."""
    _counters: defaultdict[ClientKind, Iterator[int]] = field(default_factory=lambda: defaultdict(itertools.count))

    def new_client_id(self, kind: ClientKind) -> str:
        """A readable id, unique within this backend: "training-0", "sampling-3", ..."""
        return f"{kind}-{next(self._counters[kind])}"

    def record(self, kind: ClientKind, method: str, client: str, **summary: Any) -> None:
        self.calls.append(NoopCall(kind, method, {"client": client, **summary}))
