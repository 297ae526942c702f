"""Reading comparison files in each layout, the skip rules with their report, and malformed-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from train_core.errors import DataFormatError
from train_core.preference.datasets import MAX_REPORTED_LINES, load_comparisons
from train_core.preference.types import Comparison, LabeledComparison
from train_core.renderers.base import Message, Renderer


def _write(tmp_path: Path, lines: list[Any], name: str = "data.jsonl") -> Path:
    """Each item is a record (dumped as JSON) or a raw string line."""
    path = tmp_path / name
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def _user(text: str) -> Message:
    return Message(role="user", content=text)


def _assistant(text: str) -> Message:
    return Message(role="assistant", content=text)


def test_comparisons_layout_accepts_strings_and_message_lists(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {"prompt": "What is 2 + 3?", "chosen": "5", "rejected": "6", "id": 7},
            {
                "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                "chosen": [{"role": "assistant", "content": "Hello."}],
                "rejected": "Go away.",
            },
        ],
    )
    comparisons, report = load_comparisons(path, "comparisons")
    assert comparisons == [
        LabeledComparison(Comparison([_user("What is 2 + 3?")], [_assistant("5")], [_assistant("6")]), "A"),
        LabeledComparison(
            Comparison(
                [Message(role="system", content="Be brief."), _user("Hi")],
                [_assistant("Hello.")],
                [_assistant("Go away.")],
            ),
            "A",
        ),
    ]
    assert report.num_records == 2 and report.num_skipped == 0


def test_hh_rlhf_layout_splits_at_the_last_assistant_turn(tmp_path: Path) -> None:
    shared = "\n\nHuman: Hi there\n\nAssistant: Hello! How can I help?\n\nHuman: What is 2 + 2?"
    path = _write(
        tmp_path,
        [{"chosen": shared + "\n\nAssistant: It is 4.", "rejected": shared + "\n\nAssistant: Figure it out."}],
    )
    comparisons, report = load_comparisons(path, "hh_rlhf")
    assert comparisons == [
        LabeledComparison(
            Comparison(
                [_user("Hi there"), _assistant("Hello! How can I help?"), _user("What is 2 + 2?")],
                [_assistant("It is 4.")],
                [_assistant("Figure it out.")],
            ),
            "A",
        )
    ]
    assert report.num_skipped == 0


def test_ultrafeedback_layout_strips_the_prompt_from_the_conversations(tmp_path: Path) -> None:
    question = "Name a color."
    path = _write(
        tmp_path,
        [
            {
                "prompt": question,
                "chosen": [{"role": "user", "content": question}, {"role": "assistant", "content": "Blue."}],
                "rejected": [{"role": "user", "content": question}, {"role": "assistant", "content": "No."}],
                "score_chosen": 9.0,
                "score_rejected": 2.0,
            }
        ],
    )
    comparisons, _ = load_comparisons(path, "ultrafeedback")
    assert comparisons == [
        LabeledComparison(Comparison([_user(question)], [_assistant("Blue.")], [_assistant("No.")]), "A")
    ]


def test_bad_comparisons_are_skipped_and_reported_with_line_numbers(tmp_path: Path, role_colon: Renderer) -> None:
    good = {"prompt": "What is 1 + 1?", "chosen": "2", "rejected": "3"}
    long_prompt = "What is " + " + ".join(["1"] * 40) + "?"
    path = _write(
        tmp_path,
        [
            good,  # line 1
            {"prompt": "Hi", "chosen": "", "rejected": "Go away."},  # 2: empty chosen
            "",  # 3: blank lines are ignored but still counted
            {"prompt": "Hi", "chosen": "Hello.", "rejected": []},  # 4: empty rejected
            {"prompt": "Hi", "chosen": "Same.", "rejected": "Same."},  # 5: identical
            {"prompt": long_prompt, "chosen": "40", "rejected": "41"},  # 6: prompt too long
            {"prompt": "Hi", "chosen": "   \n", "rejected": "Go away."},  # 7: blank completion
            good,  # 8
        ],
    )
    max_length = 32
    comparisons, report = load_comparisons(
        path,
        "comparisons",
        prompt_length=lambda messages: role_colon.build_generation_prompt(messages).length,
        max_length=max_length,
    )
    assert role_colon.build_generation_prompt([_user(long_prompt)]).length >= max_length
    assert len(comparisons) == 2
    assert report.num_records == 7
    assert report.counts == {"empty_completion": 3, "identical_completions": 1, "prompt_too_long": 1}
    assert report.first_lines == {"empty_completion": [2, 4, 7], "identical_completions": [5], "prompt_too_long": [6]}
    assert report.summary() == (
        f"skipped 5 of 7 comparisons in {path}: empty_completion 3 (lines 2, 4, 7); "
        "identical_completions 1 (lines 5); prompt_too_long 1 (lines 6)"
    )
    # without a length function the long prompt is kept
    kept, _ = load_comparisons(path, "comparisons")
    assert len(kept) == 3


def test_the_report_keeps_only_the_first_line_numbers(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"prompt": "Hi", "chosen": "x", "rejected": "x"}] * (MAX_REPORTED_LINES + 3))
    comparisons, report = load_comparisons(path, "comparisons")
    assert comparisons == []
    assert report.counts == {"identical_completions": MAX_REPORTED_LINES + 3}
    assert report.first_lines["identical_completions"] == list(range(1, MAX_REPORTED_LINES + 1))
    assert report.summary().endswith(", ...)")


def test_pairs_that_do_not_share_a_prompt_are_skipped(tmp_path: Path) -> None:
    hh = _write(
        tmp_path,
        [
            {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello.", "rejected": "\n\nHuman: Hey\n\nAssistant: Go away."},
            {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello.", "rejected": "\n\nHuman: Hi\n\nAssistant:"},
        ],
        name="hh.jsonl",
    )
    comparisons, report = load_comparisons(hh, "hh_rlhf")
    assert comparisons == []
    assert report.first_lines == {"mismatched_prompts": [1], "empty_completion": [2]}

    uf = _write(
        tmp_path,
        [
            {
                "prompt": "Name a color.",
                "chosen": [{"role": "user", "content": "Name a color."}, {"role": "assistant", "content": "Red."}],
                "rejected": [{"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": "No."}],
            }
        ],
        name="uf.jsonl",
    )
    comparisons, report = load_comparisons(uf, "ultrafeedback")
    assert comparisons == []
    assert report.first_lines == {"mismatched_prompts": [1]}


GOOD = {"prompt": "Hi", "chosen": "Hello.", "rejected": "Go away."}


@pytest.mark.parametrize(
    ("layout", "bad_line", "message"),
    [
        ("comparisons", '{"prompt": "Hi", "chosen": "Hello.",', "invalid JSON"),
        ("comparisons", "[1, 2]", "expected one JSON object per line, got list"),
        ("comparisons", {"prompt": "Hi", "chosen": "Hello."}, "missing key 'rejected'"),
        ("comparisons", {"prompt": "Hi", "chosen": "Hello.", "rejected": None}, "missing key 'rejected'"),
        ("comparisons", {"prompt": "Hi", "chosen": 5, "rejected": "x"}, "'chosen' must be a string or a list"),
        (
            "comparisons",
            {"prompt": [{"role": "user"}], "chosen": "a", "rejected": "b"},
            "'prompt'[0] 'content' must be a string",
        ),
        ("comparisons", {"prompt": ["Hi"], "chosen": "a", "rejected": "b"}, "'prompt'[0] must be an object"),
        ("hh_rlhf", {"chosen": "no turns here", "rejected": "\n\nHuman: Hi\n\nAssistant: x"}, "'chosen' must be turns"),
        ("hh_rlhf", {"chosen": "\n\nHuman: Hi\n\nAssistant: a", "rejected": "\n\nHuman: Hi"}, "end with an Assistant"),
        ("ultrafeedback", {"prompt": "Hi", "chosen": "Hello.", "rejected": []}, "'chosen' must be a list"),
    ],
)
def test_a_malformed_line_is_an_error_naming_file_and_line(
    tmp_path: Path, layout: str, bad_line: Any, message: str
) -> None:
    good = (
        GOOD
        if layout == "comparisons"
        else {"chosen": "\n\nHuman: Hi\n\nAssistant: a", "rejected": "\n\nHuman: Hi\n\nAssistant: b"}
        if layout == "hh_rlhf"
        else {"prompt": "Hi", "chosen": [{"role": "user", "content": "Hi"}], "rejected": []}
    )
    path = _write(tmp_path, [good, "", bad_line, good])
    with pytest.raises(DataFormatError, match=re.escape(message)) as caught:
        load_comparisons(path, layout)  # type: ignore[arg-type]
    assert caught.value.path == str(path)
    assert caught.value.line == 3
    assert str(caught.value).startswith(f"{path} line 3: ")
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("\n  \n", "holds no records"),
    ],
)
def test_an_unreadable_file_is_an_error_naming_the_file(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "comparisons.jsonl"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message) as caught:
        load_comparisons(path, "comparisons")
    assert caught.value.path == str(path)


def test_unknown_layout_and_half_given_length_rule_are_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, [GOOD])
    with pytest.raises(ValueError, match="unknown comparison layout 'anthropic'"):
        load_comparisons(path, "anthropic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prompt_length needs max_length"):
        load_comparisons(path, "comparisons", prompt_length=len)
