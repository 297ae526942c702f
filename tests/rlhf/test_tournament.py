"""Tournament rewards within a group: bounded, average one half without ties, and the both-ways
scheme cancels a judge's constant position bias."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from train_core.rl.tournament import tournament_pairs, tournament_rewards


@st.composite
def groups(draw: st.DrawFn) -> tuple[list[float], str]:
    quality = draw(st.lists(st.floats(-5, 5), min_size=2, max_size=8))
    return quality, draw(st.sampled_from(["one_way", "both_ways"]))


def prefer_better(quality: list[float], a: int, b: int, bias: float = 0.0) -> float:
    """A judge that prefers the better sample (a tanh of the quality gap), plus a lean towards B."""
    return max(-1.0, min(1.0, math.tanh(quality[b] - quality[a]) * (1 - abs(bias)) + bias))


@given(groups())
def test_rewards_in_unit_interval_and_average_one_half_without_ties(group: tuple[list[float], str]) -> None:
    quality, scheme = group
    pairs = tournament_pairs(len(quality), scheme)  # type: ignore[arg-type]
    scores = [1.0 if quality[b] > quality[a] else -1.0 for a, b in pairs]  # decisive: no ties
    result = tournament_rewards(len(quality), pairs, scores)
    assert all(0.0 <= r <= 1.0 for r in result.rewards_G)
    assert math.isclose(sum(result.rewards_G) / len(quality), 0.5)
    assert result.tie_fraction == 0.0


@given(groups(), st.floats(-0.9, 0.9))
def test_both_ways_cancels_a_constant_position_bias(group: tuple[list[float], str], bias: float) -> None:
    quality, _ = group
    n = len(quality)
    pairs = tournament_pairs(n, "both_ways")
    # a judge whose answers are antisymmetric plus a constant lean towards B (kept inside [-1, 1])
    unbiased = [math.tanh(quality[b] - quality[a]) * 0.5 for a, b in pairs]
    biased = [s + bias * 0.5 for s in unbiased]
    fair = tournament_rewards(n, pairs, unbiased)
    leaning = tournament_rewards(n, pairs, biased)
    for r_fair, r_leaning in zip(fair.rewards_G, leaning.rewards_G, strict=True):
        assert math.isclose(r_fair, r_leaning, abs_tol=1e-9)
    assert leaning.position_bias is not None
    assert math.isclose(leaning.position_bias, bias * 0.5, abs_tol=1e-9)
    assert fair.position_bias is not None and abs(fair.position_bias) < 1e-9


def test_reward_arithmetic_by_hand() -> None:
    # three samples, one way: 1 beats 0, 2 beats 0, 1 and 2 tie
    pairs = tournament_pairs(3, "one_way")
    assert pairs == [(0, 1), (0, 2), (1, 2)]
    result = tournament_rewards(3, pairs, [1.0, 1.0, 0.0])
    assert result.rewards_G == [0.0, 0.75, 0.75]
    assert math.isclose(result.tie_fraction, 1 / 3)
    assert result.position_bias is None


def test_bad_scores_are_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        tournament_rewards(2, [(0, 1)], [1.5])
    with pytest.raises(ValueError, match="pairs but"):
        tournament_rewards(2, [(0, 1)], [])
