"""Estimators behind evaluation metrics: a mean with its standard error, the unbiased pass@k,
majority voting over sampled answers, and a seeded bootstrap for statistics that have no simple
analytic error (a token-weighted mean).

Each estimate carries `n`, the number of independent units it averages over (problems, not
samples: the K samples of one problem are correlated, so the error is taken over per-problem
values).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Estimate:
    """A metric's value, its standard error (None where it is undefined: fewer than two units)
    and the number of units behind it."""

    value: float
    stderr: float | None
    n: int


def mean_with_stderr(values: Sequence[float]) -> Estimate:
    """The mean and its standard error `std(ddof=1) / sqrt(n)`."""
    n = len(values)
    if n == 0:
        raise ValueError("no values to average")
    mean = math.fsum(values) / n
    if n == 1:
        return Estimate(mean, None, 1)
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return Estimate(mean, math.sqrt(variance / n), n)


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """The unbiased estimate of pass@k from `num_correct` correct among `num_samples` samples:
    `1 - C(n - c, k) / C(n, k)`, the chance that k samples drawn without replacement include a
    correct one. Computed as a product, so large n does not overflow."""
    if not 0 <= num_correct <= num_samples:
        raise ValueError(f"num_correct={num_correct} must lie in [0, num_samples={num_samples}]")
    if not 1 <= k <= num_samples:
        raise ValueError(f"k={k} must lie in [1, num_samples={num_samples}]")
    if num_samples - num_correct < k:
        return 1.0
    miss = 1.0
    for i in range(num_samples - num_correct + 1, num_samples + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def pass_at_k_values(num_samples: int) -> list[int]:
    """The k reported for `num_samples` samples per problem: 1, 2, 4, ... below it, and itself."""
    ks = [1]
    while ks[-1] * 2 < num_samples:
        ks.append(ks[-1] * 2)
    if num_samples > 1:
        ks.append(num_samples)
    return ks


def majority_vote(answers: Sequence[Hashable | None]) -> int | None:
    """Index of the first sample holding the most frequent answer (None answers do not vote; a
    tie goes to the answer seen first), or None when no sample gave an answer."""
    counts: dict[Hashable, int] = {}
    first: dict[Hashable, int] = {}
    for index, answer in enumerate(answers):
        if answer is None:
            continue
        counts[answer] = counts.get(answer, 0) + 1
        first.setdefault(answer, index)
    if not counts:
        return None
    winner = max(counts, key=lambda answer: (counts[answer], -first[answer]))
    return first[winner]


def bootstrap_stderr(
    num_units: int, statistic: Callable[[Sequence[int]], float], resamples: int = 1000, seed: int = 0
) -> float | None:
    """Standard deviation of `statistic(indices)` over `resamples` resamplings of the unit indices
    with replacement, drawn from a generator seeded with `seed` (same inputs, same error).
    None for fewer than two units."""
    if num_units < 2:
        return None
    if resamples < 2:
        raise ValueError(f"resamples={resamples} must be at least 2")
    rng = random.Random(seed)
    values = [statistic([rng.randrange(num_units) for _ in range(num_units)]) for _ in range(resamples)]
    mean = math.fsum(values) / resamples
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (resamples - 1))
