"""Deterministic epoch shuffling and batching (a resumed run sees exactly the same batches), and
even splits of a batch into optimizer substeps."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def epoch_permutation(num_examples: int, seed: int, epoch: int) -> list[int]:
    """The example order of `epoch`: a shuffle seeded by (seed, epoch) alone."""
    order = list(range(num_examples))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return order


def batches_per_epoch(num_examples: int, batch_size: int) -> int:
    """Full batches only: the last partial batch of an epoch is dropped."""
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    return num_examples // batch_size


def batch_for_step(step: int, num_examples: int, batch_size: int, seed: int) -> tuple[int, int, list[int]]:
    """(epoch, batch index within the epoch, example indices) of global 0-based `step`."""
    per_epoch = batches_per_epoch(num_examples, batch_size)
    if per_epoch == 0:
        raise ValueError(f"{num_examples} examples are fewer than one batch of {batch_size}")
    epoch, batch = divmod(step, per_epoch)
    order = epoch_permutation(num_examples, seed, epoch)
    return epoch, batch, order[batch * batch_size : (batch + 1) * batch_size]


def split_evenly(items: Sequence[T], num_chunks: int) -> list[list[T]]:
    """`min(num_chunks, len(items))` contiguous chunks whose sizes differ by at most one."""
    if num_chunks < 1:
        raise ValueError(f"num_chunks must be >= 1, got {num_chunks}")
    n = min(num_chunks, len(items))
    bounds = [len(items) * i // n for i in range(n + 1)] if n else [0]
    return [list(items[bounds[i] : bounds[i + 1]]) for i in range(n)]
