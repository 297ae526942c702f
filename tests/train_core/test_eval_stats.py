"""The estimators behind `kitchen eval`'s metrics, pinned against their definitions."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from train_core.eval_stats import (
    bootstrap_stderr,
    majority_vote,
    mean_with_stderr,
    pass_at_k,
    pass_at_k_values,
)


def pass_at_k_by_enumeration(n: int, c: int, k: int) -> float:
    """The share of k-subsets of n samples (c of them correct) holding a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_share_of_k_subsets_with_a_correct_sample(case: tuple[int, int, int]) -> None:
    n, c, k = case
    assert pass_at_k(n, c, k) == pytest.approx(pass_at_k_by_enumeration(n, c, k), abs=1e-12)


@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_1_is_the_correct_share_and_pass_at_k_grows_with_k(case: tuple[int, int]) -> None:
    n, c = case
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(values))
    assert values[-1] == (1.0 if c else 0.0)


def test_pass_at_k_matches_the_binomial_formula_at_large_n() -> None:
    n, c, k = 200, 13, 50
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), rel=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_refuses_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_reported_k_are_powers_of_two_and_the_sample_count() -> None:
    assert pass_at_k_values(1) == [1]
    assert pass_at_k_values(2) == [1, 2]
    assert pass_at_k_values(8) == [1, 2, 4, 8]
    assert pass_at_k_values(10) == [1, 2, 4, 8, 10]


@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=50))
def test_mean_and_stderr_are_the_sample_mean_and_std_over_root_n(values: list[float]) -> None:
    estimate = mean_with_stderr(values)
    assert estimate.n == len(values)
    assert estimate.value == pytest.approx(statistics.fmean(values), abs=1e-6)
    assert estimate.stderr == pytest.approx(statistics.stdev(values) / math.sqrt(len(values)), rel=1e-6, abs=1e-6)


def test_one_value_has_no_stderr_and_none_is_an_error() -> None:
    assert mean_with_stderr([0.5]).stderr is None
    with pytest.raises(ValueError):
        mean_with_stderr([])


def test_majority_vote_picks_the_most_frequent_answer_first_seen_on_ties() -> None:
    assert majority_vote(["3", "4", "4", "3", None, "4"]) == 1
    assert majority_vote(["3", "4", "4", "3"]) == 0  # tie: "3" came first
    assert majority_vote([None, "5"]) == 1
    assert majority_vote([None, None]) is None


@given(st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=12))
def test_the_vote_goes_to_an_answer_no_other_outnumbers(answers: list[str | None]) -> None:
    winner = majority_vote(answers)
    given_answers = [a for a in answers if a is not None]
    if winner is None:
        assert not given_answers
        return
    chosen = answers[winner]
    assert chosen is not None and answers.index(chosen) == winner
    assert all(given_answers.count(chosen) >= given_answers.count(a) for a in given_answers)


def test_bootstrap_is_seeded_and_near_the_analytic_error_of_a_mean() -> None:
    values = [float(i % 7) for i in range(200)]

    def mean(indices: Sequence[int]) -> float:
        return sum(values[i] for i in indices) / len(indices)

    first = bootstrap_stderr(len(values), mean, resamples=500, seed=3)
    assert first == bootstrap_stderr(len(values), mean, resamples=500, seed=3)
    assert first != bootstrap_stderr(len(values), mean, resamples=500, seed=4)
    analytic = mean_with_stderr(values).stderr
    assert analytic is not None and first == pytest.approx(analytic, rel=0.1)
    assert bootstrap_stderr(1, mean) is None
