"""Comparison prompts for a preference model: both orderings carry opposite labels, the label is
parsed back, and the judge's score follows the label probabilities."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from train_core.preference.comparison_prompt import (
    both_orderings,
    comparison_example,
    judge_score,
    label_probabilities,
    parse_label,
)
from train_core.preference.types import Comparison, LabeledComparison

text = st.text(alphabet="abc xyz 0123456789.!?", min_size=1, max_size=20)


@st.composite
def labeled_comparisons(draw: st.DrawFn) -> LabeledComparison:
    prompt = [{"role": "user", "content": draw(text)}]
    a, b = [{"role": "assistant", "content": draw(text)}], [{"role": "assistant", "content": draw(text)}]
    return LabeledComparison(Comparison(prompt, a, b), draw(st.sampled_from(["A", "B"])))  # type: ignore[arg-type]


@given(labeled_comparisons())
def test_both_orderings_give_opposite_labels_for_the_same_preferred_completion(labeled: LabeledComparison) -> None:
    first, second = both_orderings([labeled])
    assert {first.label, second.label} == {"A", "B"}
    assert first.chosen_and_rejected() == second.chosen_and_rejected()
    example_first, example_second = comparison_example(first), comparison_example(second)
    assert example_first[-1]["content"] != example_second[-1]["content"]
    assert parse_label(example_first[-1]["content"]) == first.label
    # the prompt shows the same completions, swapped
    a_text = labeled.comparison.completion_A[0]["content"]
    b_text = labeled.comparison.completion_B[0]["content"]
    assert f"Reply A: {a_text}\nReply B: {b_text}" in example_first[0]["content"]
    assert f"Reply A: {b_text}\nReply B: {a_text}" in example_second[0]["content"]


def test_parse_label() -> None:
    assert parse_label(" A") == "A"
    assert parse_label("b.") == "B"
    assert parse_label("Tie") is None
    assert parse_label("tie!", allow_tie=True) == "Tie"
    assert parse_label("") is None
    assert parse_label("Both") is None


@given(st.floats(-30, 0), st.floats(-30, 0))
def test_judge_score_is_antisymmetric_and_bounded(lp_a: float, lp_b: float) -> None:
    score = judge_score({"A": lp_a, "B": lp_b})
    assert -1.0 <= score <= 1.0
    assert math.isclose(score, -judge_score({"A": lp_b, "B": lp_a}), abs_tol=1e-12)
    assert math.isclose(sum(label_probabilities({"A": lp_a, "B": lp_b}).values()), 1.0)


def test_judge_score_values() -> None:
    assert math.isclose(judge_score({"A": math.log(0.2), "B": math.log(0.6)}), 0.75 - 0.25)
    assert judge_score({"A": -1.0, "B": -1.0, "Tie": -1.0}) == 0.0
