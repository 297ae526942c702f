"""Code extraction, the assert split, report grading and stdin/stdout comparison (no sandbox)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from train_core.errors import InvalidInputError
from train_core.rl.code_grading import (
    assert_harness,
    extract_code,
    grade_assert_reports,
    outputs_match,
    plan_assert_tests,
    read_reports,
)

NONCE = "0123456789abcdef"


def test_extract_code() -> None:
    assert extract_code("Here:\n```python\nx = 1\n```\nDone.") == "x = 1\n"
    assert extract_code("```\nuntagged = 1\n```") == "untagged = 1\n"
    assert extract_code("```py\na = 1\n```\ntext\n```python\nb = 2\n```") == "b = 2\n"
    assert extract_code("```python\nkept = 1\n```\n```bash\nls\n```") == "kept = 1\n"
    assert extract_code("def f(x):\n    return x") is None  # unfenced: a format failure
    assert extract_code("```python\nnever closed") is None


@given(
    st.text(alphabet=st.characters(blacklist_characters="`"), max_size=40),
    st.text(max_size=40).filter(lambda s: "```" not in s),
)
def test_extract_code_finds_the_block_around_any_prose(prose: str, body: str) -> None:
    body = body.replace("\r", "")
    reply = f"{prose}\n```python\n{body}\n```\n{prose}"
    assert extract_code(reply) == body + "\n"


def test_plan_keeps_literals_out_of_the_sandbox() -> None:
    plan = plan_assert_tests(["x = 2\nassert f(x) == 12345", "assert abs(g(1.5) - 2.25) < 1e-6"])
    sandbox_side = json.dumps([list(steps) for steps in plan.steps])
    assert "12345" not in sandbox_side and "2.25" in sandbox_side  # `g(1.5) - 2.25` is computed there
    assert "1e-06" not in sandbox_side
    harness = assert_harness("def f(x): pass", plan, NONCE)
    assert "12345" not in harness.code + json.dumps(harness.files) and harness.stdin == NONCE + "\n"


@pytest.mark.parametrize(
    ("tests", "message"),
    [
        ([], "no tests"),
        (["assert f(1) =="], "not valid Python"),
        (["x = f(1)"], "no assert"),
        (["for i in range(3):\n    assert f(i) == i"], "top-level"),
    ],
)
def test_bad_tests_are_rejected(tests: list[str], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        plan_assert_tests(tests)


def report(test: int, index: int, *values: object) -> str:
    return f"{NONCE} " + json.dumps({"t": test, "a": index, "v": list(values)})


def grade(tests: list[str], *lines: str) -> tuple[int, int, str]:
    verdict = grade_assert_reports(plan_assert_tests(tests), read_reports("\n".join(lines), NONCE))
    return verdict.passed, verdict.total, verdict.detail


def test_grading_reports() -> None:
    tests = ["assert f(2) == 5", "assert not g([])\nassert h('a') in ['a', 'b']"]
    ok = [report(0, 0, ["i", "5"]), report(1, 0, ["l", []]), report(1, 1, ["s", "a"])]
    assert grade(tests, *ok)[:2] == (2, 2)
    assert grade(tests, "noise", *ok, "more noise")[:2] == (2, 2)
    assert grade(tests, report(0, 0, ["i", "6"]), *ok[1:])[:2] == (1, 2)
    assert "0 times" in grade(tests, *ok[1:])[2]  # test 0 never reported: early exit
    assert "2 times" in grade(tests, *ok, ok[0])[2]  # a forged duplicate
    assert grade(tests, report(0, 0, ["f", (5.0).hex()]), *ok[1:])[:2] == (2, 2)  # 5.0 == 5, as in Python
    assert grade(tests, report(0, 0, ["x", "5"]), *ok[1:])[:2] == (1, 2)  # malformed value
    assert grade(tests, f'{NONCE} {{"load": "SyntaxError"}}', *ok)[:2] == (0, 2)
    assert grade(tests, f'{NONCE} {{"t": 0, "e": "ZeroDivisionError"}}', *ok)[:2] == (1, 2)
    assert grade(tests, *(line.replace(NONCE, "f" * 16) for line in ok))[:2] == (0, 2)  # wrong nonce


def test_chained_and_float_comparisons() -> None:
    assert grade(["assert 0 < f() <= 3"], report(0, 0, ["i", "3"]))[0] == 1
    assert grade(["assert 0 < f() <= 3"], report(0, 0, ["i", "4"]))[0] == 0
    assert grade(["assert abs(f() - 0.3) < 1e-9"], report(0, 0, ["f", (0.1 + 0.2 - 0.3).hex()]))[0] == 1
    assert grade(["assert f() is None"], report(0, 0, None))[0] == 1
    assert grade(["assert f() < 1"], report(0, 0, ["s", "a"]))[0] == 0  # str < int raises: a failure


def test_outputs_match() -> None:
    assert outputs_match("1 2\n3\n\n", "1 2\n3")
    assert outputs_match("  a  \r\nb\n", "a\nb")
    assert not outputs_match("1 2\n3", "1 2\n4")
    assert not outputs_match("1\n2", "1 2")


@given(
    st.lists(st.text(alphabet="ab 1", max_size=8), max_size=5),
    st.lists(st.sampled_from(["", " ", "\t"]), min_size=5, max_size=5),
)
def test_outputs_match_ignores_surrounding_whitespace(lines: list[str], pads: list[str]) -> None:
    padded = "\n".join(pads[i % 5] + line + pads[(i + 1) % 5] for i, line in enumerate(lines)) + "\n\n"
    assert outputs_match(padded, "\n".join(lines))


@pytest.mark.parametrize(
    "report",
    [
        {"t": [], "a": 0, "v": []},
        {"t": 0, "a": {}, "v": [["i", "5"]]},
        {"t": {}, "e": "x"},
        {"t": 0, "a": 0, "v": 5},
        {"t": 0, "a": 0, "v": [["zz"]]},
        {"t": 0, "a": 9, "v": []},
        {"t": True, "a": 0, "v": [["i", "5"]]},
        {"t": 0, "a": 0, "v": [None, [[[[]]]]]},
        {"load": ["not", "a", "string"]},
    ],
)
def test_a_malformed_report_fails_the_assert_never_raises(report: dict[str, object]) -> None:
    plan = plan_assert_tests(["assert f(2) == 5"])
    verdict = grade_assert_reports(plan, [report])
    assert verdict.passed == 0 and verdict.total == 1
