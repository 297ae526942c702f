"""Brier score, its decomposition and ECE: the published identities as properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from train_core.calibration import bin_index, brier_score, calibration

probability = st.floats(0.0, 1.0, allow_nan=False)
forecasts = st.lists(st.tuples(probability, st.sampled_from([0.0, 1.0])), min_size=1, max_size=60)


@settings(deadline=None, max_examples=200)
@given(forecasts, st.integers(1, 20))
def test_the_decomposition_sums_to_the_brier_score(pairs: list[tuple[float, float]], num_bins: int) -> None:
    ps, os = [p for p, _ in pairs], [o for _, o in pairs]
    c = calibration(ps, os, num_bins)
    assert math.isclose(c.brier, c.reliability - c.resolution + c.uncertainty + c.within_bin, abs_tol=1e-12)
    assert c.reliability >= 0 and c.resolution >= 0 and 0 <= c.uncertainty <= 0.25
    assert 0 <= c.brier <= 1 and 0 <= c.ece <= 1
    assert c.ece**2 <= c.reliability + 1e-12  # Jensen: the mean |gap| squared is at most the mean gap squared


@settings(deadline=None, max_examples=100)
@given(st.lists(st.tuples(st.integers(0, 9), st.sampled_from([0.0, 1.0])), min_size=1, max_size=60))
def test_forecasts_constant_within_bins_leave_no_residual(pairs: list[tuple[int, float]]) -> None:
    """Murphy's identity is exact when each bin holds one forecast value (bin centres here)."""
    ps = [(k + 0.5) / 10 for k, _ in pairs]
    c = calibration(ps, [o for _, o in pairs], 10)
    assert abs(c.within_bin) < 1e-12


@settings(deadline=None, max_examples=100)
@given(st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=50))
def test_the_base_rate_forecast_scores_the_uncertainty_and_is_calibrated(outcomes: list[float]) -> None:
    rate = sum(outcomes) / len(outcomes)
    c = calibration([rate] * len(outcomes), outcomes)
    assert math.isclose(c.brier, rate * (1 - rate), abs_tol=1e-12)
    assert c.reliability < 1e-24 and c.resolution < 1e-24 and c.ece < 1e-12


@settings(deadline=None, max_examples=100)
@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_the_brier_score_is_proper(belief: float, report: float) -> None:
    """The expected score under the forecaster's belief is lowest for reporting that belief."""

    def expected(p: float) -> float:
        return belief * brier_score([p], [1.0]) + (1 - belief) * brier_score([p], [0.0])

    assert expected(belief) <= expected(report) + 1e-12


def test_a_worked_example() -> None:
    c = calibration([0.9, 0.9, 0.1, 0.1], [1.0, 0.0, 0.0, 0.0], num_bins=10)
    assert c.brier == pytest.approx((0.01 + 0.81 + 0.01 + 0.01) / 4)
    # bins: 0.9 -> outcome rate 0.5 (gap 0.4); 0.1 -> rate 0 (gap 0.1)
    assert c.ece == pytest.approx((2 * 0.4 + 2 * 0.1) / 4)
    assert c.reliability == pytest.approx((2 * 0.16 + 2 * 0.01) / 4)
    assert c.uncertainty == pytest.approx(0.25 * 0.75)
    assert bin_index(1.0, 10) == 9 and bin_index(0.0, 10) == 0


@pytest.mark.parametrize(
    ("ps", "os", "message"),
    [
        ([], [], "no forecasts"),
        ([1.2], [1.0], r"\[0, 1\]"),
        ([0.5], [0.5], "0 or 1"),
        ([0.5], [1.0, 0.0], "2 outcomes"),
    ],
)
def test_bad_input_is_named(ps: list[float], os: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        calibration(ps, os)
