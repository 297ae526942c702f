"""Finding and comparing math answers (math-verify, plus kitchen's one rule on top); GSM8K
final-answer parsing."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from train_core.rl.math_grading import (
    AnswerParseError,
    extract_answer,
    extract_boxed,
    extract_last_number,
    grade_answer,
    parse_gsm8k_answer,
)


@pytest.mark.parametrize(
    ("text", "boxed"),
    [
        ("so \\boxed{42}.", "42"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\fbox{7} is it", "7"),
        ("\\boxed{3} and finally \\fbox{4}", "4"),
        ("unclosed \\boxed{12", None),
        ("no box: 12", None),
    ],
)
def test_extract_boxed(text: str, boxed: str | None) -> None:
    assert extract_boxed(text) == boxed


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("He has 3 apples and buys 4, so 7.", "7"),
        ("It costs $1,234.50 in total", "1,234.50"),
        ("The temperature is -3 degrees", "-3"),
        ("pages 5-6", "6"),  # a minus between numbers is not a sign
        ("x = 2.5", "2.5"),
        ("no digits here", None),
    ],
)
def test_extract_last_number(text: str, number: str | None) -> None:
    assert extract_last_number(text) == number


def test_extract_answer_prefers_the_box_over_a_later_number() -> None:
    assert extract_answer("\\boxed{10} because 5 + 5 = 10, checked 3 times") == "10"
    assert extract_answer("5 + 5 = 10") == "10"
    assert extract_answer("I do not know") is None


@pytest.mark.parametrize(
    ("reply", "reference"),
    [
        ("1,000", "1000"),
        ("1000.0", "1000"),
        ("$5", "5"),
        ("\\$5.00", "5"),
        ("\\frac{1}{2}", "0.5"),
        ("$\\dfrac{3}{4}$", "0.75"),
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("50\\%", "50"),
        ("50%", "0.5"),
        ("x = 3", "3"),
        ("\\boxed{\\text{12 }}", "12"),
        ("7.", "7"),
        ("The answer is \\boxed{(1, 2)}.", "(1,2)"),
        ("She pays 3 * 4 = 12 dollars.", "12"),
        ("7/1", "7"),
    ],
)
def test_equal_answers_in_other_spellings_are_right(reply: str, reference: str) -> None:
    assert grade_answer(reply, reference)


@pytest.mark.parametrize(
    ("reply", "reference"),
    [("5", "6"), ("0.5", "0.05"), ("1/2", "2"), ("\\boxed{(1,2)}", "(2,1)"), ("no answer here", "12"), ("", "1")],
)
def test_different_or_missing_answers_are_wrong(reply: str, reference: str) -> None:
    assert not grade_answer(reply, reference)


@settings(max_examples=25)  # each case parses four replies with SymPy (~10 ms each)
@given(st.integers(-(10**9), 10**9))
def test_an_integer_matches_its_comma_and_decimal_spellings(n: int) -> None:
    assert grade_answer(f"{n:,}", str(n))
    assert grade_answer(f"{n}.00", str(n))
    assert grade_answer(f"The answer is \\boxed{{{n:,}}}.", str(n))
    assert not grade_answer(f"The answer is \\boxed{{{n + 1}}}.", str(n))


def test_the_box_wins_over_a_later_number() -> None:
    assert not grade_answer("\\boxed{11} (or maybe 12)", "12")
    assert grade_answer("\\boxed{11} (or maybe 12)", "11")


def test_an_unevaluated_operation_is_not_an_answer() -> None:
    """Kitchen's rule on top of math-verify (which evaluates `3 + 4` to 7): a policy asked "What
    is 3 + 4?" must not be paid for echoing the question."""
    assert not grade_answer("3 + 4", "7")
    assert not grade_answer("\\boxed{2 \\times 6}", "12")
    assert grade_answer("3 + 4 = 7", "7")  # the work, then the value
    assert grade_answer("\\boxed{-3}", "-3")  # a sign is not an operation


@pytest.mark.parametrize(
    ("reply", "reference"),
    [
        (" A greear life0\n\nUser", "0"),
        (" \x1c happy0", "0"),
        ("GraceX motherireathergh clever number contsk3 human a", "3"),
        (" bird snow6itary job strong open", "6"),
    ],
)
def test_a_digit_inside_a_word_is_no_answer(reply: str, reference: str) -> None:
    """The one kind of disagreement on the shipped sets (12 of 3,269 graded replies of the tiny
    model, before and after math_rl): the old grader took the last digit anywhere as the answer,
    math-verify finds none. Right: none; the model did not state a number."""
    assert not grade_answer(reply, reference)
    assert grade_answer(reply.replace(reference, f" {reference} ", 1), reference)


def test_an_escaped_dollar_is_a_currency_sign() -> None:
    """math-verify alone finds no answer in `It costs \\$5.00.`; the old grader read 5. Right: 5."""
    assert grade_answer("It costs \\$5.00.", "5")
    assert not grade_answer("It costs \\$6.00.", "5")


def test_grading_works_off_the_main_thread() -> None:
    """math-verify's timeouts need the main thread's SIGALRM; in a worker thread they are off."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(grade_answer, "so \\boxed{42}", "42.0").result()


def test_parse_gsm8k_answer() -> None:
    solution = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n48+24 = <<48+24=72>>72\n#### 1,072"
    assert parse_gsm8k_answer(solution) == "1072"
    assert parse_gsm8k_answer("#### -3.5 ") == "-3.5"


def test_gsm8k_answer_errors_name_the_source() -> None:
    with pytest.raises(AnswerParseError, match=r"train\.jsonl:3 key 'answer': no '####' marker"):
        parse_gsm8k_answer("The answer is 4", where="train.jsonl:3 key 'answer'")
    with pytest.raises(AnswerParseError, match="nothing after"):
        parse_gsm8k_answer("work...\n####  ")
    assert issubclass(AnswerParseError, ValueError)
