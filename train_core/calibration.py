"""Scoring probability forecasts of yes/no outcomes: the Brier score, its Murphy decomposition
over probability bins, and the expected calibration error (ECE).

The Brier score `mean((p - o)^2)` is a strictly proper scoring rule: a forecaster minimises its
expected score only by reporting the probability it believes, which is what makes `-brier` a
reward that trains honest forecasts. The decomposition says why a score is what it is:

    brier = reliability - resolution + uncertainty + within_bin

- reliability `sum_k n_k (f_k - o_k)^2 / N`: how far each bin's mean forecast `f_k` is from the
  frequency `o_k` of the outcome in it (0 = calibrated);
- resolution `sum_k n_k (o_k - o)^2 / N`: how much the bins' frequencies differ from the base rate
  `o` (higher = the forecasts tell outcomes apart);
- uncertainty `o (1 - o)`: the score of always forecasting the base rate;
- within_bin: what binning leaves out (forecasts that differ inside a bin); exactly 0 when every
  forecast in a bin is the same, as Murphy's original decomposition assumes.

ECE is `sum_k n_k |f_k - o_k| / N` over the same bins; by Jensen's inequality `ece^2 <= reliability`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def _check(probabilities: Sequence[float], outcomes: Sequence[float]) -> None:
    if len(probabilities) != len(outcomes):
        raise ValueError(f"{len(probabilities)} forecasts but {len(outcomes)} outcomes")
    if not probabilities:
        raise ValueError("no forecasts to score")
    if any(not 0.0 <= p <= 1.0 for p in probabilities):
        raise ValueError("forecast probabilities must lie in [0, 1]")
    if any(o not in (0.0, 1.0) for o in outcomes):
        raise ValueError("outcomes must be 0 or 1")


def brier(probability: float, outcome: float) -> float:
    """One forecast's Brier score `(p - o)^2`: 0 is perfect, 1 is certain and wrong."""
    return (probability - outcome) ** 2


def brier_score(probabilities: Sequence[float], outcomes: Sequence[float]) -> float:
    """The mean Brier score of a set of forecasts."""
    _check(probabilities, outcomes)
    return math.fsum(brier(p, o) for p, o in zip(probabilities, outcomes, strict=True)) / len(outcomes)


def bin_index(probability: float, num_bins: int) -> int:
    """The equal-width bin of `[0, 1]` a probability falls in (1.0 in the last one)."""
    return min(int(probability * num_bins), num_bins - 1)


@dataclass(frozen=True)
class Calibration:
    """A forecast set's Brier score, its decomposition and its ECE (see the module doc)."""

    brier: float
    reliability: float
    resolution: float
    uncertainty: float
    within_bin: float
    ece: float
    n: int

    def as_metrics(self, prefix: str = "") -> dict[str, float]:
        return {
            f"{prefix}brier": self.brier,
            f"{prefix}reliability": self.reliability,
            f"{prefix}resolution": self.resolution,
            f"{prefix}uncertainty": self.uncertainty,
            f"{prefix}ece": self.ece,
        }


def calibration(probabilities: Sequence[float], outcomes: Sequence[float], num_bins: int = 10) -> Calibration:
    """The Brier score of `probabilities` against the 0/1 `outcomes`, decomposed over `num_bins`
    equal-width probability bins, and the ECE over the same bins."""
    _check(probabilities, outcomes)
    if num_bins < 1:
        raise ValueError("num_bins must be at least 1")
    n = len(outcomes)
    bins: dict[int, list[tuple[float, float]]] = {}
    for p, o in zip(probabilities, outcomes, strict=True):
        bins.setdefault(bin_index(p, num_bins), []).append((p, o))
    base_rate = math.fsum(outcomes) / n
    reliability = resolution = ece = 0.0
    for members in bins.values():
        mean_forecast = math.fsum(p for p, _ in members) / len(members)
        frequency = math.fsum(o for _, o in members) / len(members)
        reliability += len(members) * (mean_forecast - frequency) ** 2
        resolution += len(members) * (frequency - base_rate) ** 2
        ece += len(members) * abs(mean_forecast - frequency)
    score = brier_score(probabilities, outcomes)
    reliability, resolution, ece = reliability / n, resolution / n, ece / n
    uncertainty = base_rate * (1.0 - base_rate)
    within = score - (reliability - resolution + uncertainty)
    return Calibration(score, reliability, resolution, uncertainty, within, ece, n)
