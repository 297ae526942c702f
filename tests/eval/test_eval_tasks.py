"""kitchen eval's pieces without a model: metrics from grades, graders, and planning tasks from
the command line (names, data files, settings, errors that say what is wrong)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kitchen.apps.eval.command import plan_tasks
from kitchen.engine.errors import ConfigError
from kitchen.engine.eval_tasks import eval_tasks, graders
from kitchen.families.evaluation.generation import Grade, Item, item_seed, summarise
from kitchen.families.evaluation.graders import GraderError, as_grade, resolve_grader

SHARED = {"limit": None, "samples": None, "seed": None, "temperature": None, "max_tokens": None}


def grades(*rows: str) -> list[list[Grade]]:
    """Each row one item's samples: `y` right, `n` wrong; the answer is the letter's position
    class (`y` -> "good", `n` -> "bad<i>"), so wrong answers differ unless told otherwise."""
    return [
        [
            Grade(c == "y", float(c == "y"), answer="good" if c == "y" else ("same" if c == "s" else f"bad{i}"))
            for i, c in enumerate(row)
        ]
        for row in rows
    ]


def test_summary_metrics_follow_their_definitions() -> None:
    metrics = summarise(grades("yyn", "nnn", "ynn", "yyy"))
    assert metrics["accuracy"].value == pytest.approx((2 / 3 + 0 + 1 / 3 + 1) / 4)
    assert metrics["accuracy"].n == 4
    # pass@2 per item: 1 - C(n-c, 2)/C(3, 2)
    assert metrics["pass@2"].value == pytest.approx((1 + 0 + (1 - 1 / 3) + 1) / 4)
    assert metrics["pass@3"].value == pytest.approx(3 / 4)
    # maj@3: the majority answer is right in items 1 and 4; item 3's wrong answers all differ,
    # so "good" (one vote, seen first) wins there too
    assert metrics["maj@3"].value == pytest.approx(3 / 4)
    assert "pass@1" not in metrics  # that is accuracy


def test_majority_of_one_wrong_answer_beats_a_single_right_one() -> None:
    metrics = summarise(grades("yss"))
    assert metrics["maj@3"].value == 0.0 and metrics["pass@3"].value == 1.0


def test_one_sample_per_item_reports_accuracy_and_reward_only() -> None:
    assert set(summarise(grades("y", "n"))) == {"accuracy", "mean_reward"}


def test_item_seeds_are_stable_and_distinct() -> None:
    assert item_seed(0, 1) == item_seed(0, 1) and 0 <= item_seed(0, 1) < 2**63
    assert len({item_seed(s, i) for s in range(3) for i in range(50)}) == 150


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, Grade(True, 1.0)),
        (0.25, Grade(False, 0.25)),
        (1, Grade(True, 1.0)),
        ({"correct": False, "reason": "r", "answer": "7"}, Grade(False, 0.0, "r", "7")),
        ({"score": 2.0}, Grade(True, 2.0)),
        ({"correct": True, "score": 0.5}, Grade(True, 0.5)),
    ],
)
def test_grader_results_become_grades(value: object, expected: Grade) -> None:
    assert as_grade(value, "g") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("yes", "returned str 'yes'; a grade is a bool, a number or a dict"),
        (float("nan"), "must be finite"),
        ({"reason": "x"}, "neither 'correct' nor 'score'"),
        ({"correct": 1}, "'correct' = 1; it must be a bool"),
        ({"correct": True, "why": "x"}, "unknown key 'why'"),
    ],
)
def test_bad_grader_results_are_errors_naming_the_grader(value: object, message: str) -> None:
    with pytest.raises(GraderError, match=message):
        as_grade(value, "grader g")


def test_a_grader_that_raises_is_named_with_the_item() -> None:
    grader = resolve_grader("tests.eval.graders_for_tests:explodes", graders())
    item = Item([{"role": "user", "content": "q"}], {"answer": "1"}, "data.jsonl line 3")
    with pytest.raises(
        GraderError,
        match=r"grader tests.eval.graders_for_tests:explodes on data.jsonl line 3 raised "
        r"ZeroDivisionError: the grader divided by zero",
    ):
        asyncio.run(grader(item, "1"))


def test_named_graders() -> None:
    math = resolve_grader("math", graders())
    item = Item([], {"answer": "12"}, "x")
    assert asyncio.run(math(item, "so \\boxed{12}")) == Grade(True, 1.0, "answer '12' = '12'", "12")
    assert not asyncio.run(resolve_grader("exact", graders())(item, " 13 ")).correct
    with pytest.raises(ConfigError, match="unknown grader 'mathh'; did you mean 'math'"):
        resolve_grader("mathh", graders())
    with pytest.raises(ConfigError, match="module 'no_such_module' cannot be imported"):
        resolve_grader("no_such_module:grade", graders())


def test_the_shipped_recipes_register_their_sets_and_kitchen_its_own() -> None:
    assert {"arithmetic", "gsm8k", "code", "jsonl", "nll", "preference"} <= set(eval_tasks())


def test_unknown_task_suggests_the_closest_name() -> None:
    with pytest.raises(ConfigError, match="unknown task 'arithmetc'; did you mean 'arithmetic'"):
        plan_tasks(["arithmetc"], SHARED, None, [])


def test_data_files_and_settings_reach_the_right_task(tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "2+2?", "answer": "4"}\n')
    requests = plan_tasks(
        ["arithmetic", f"nll:{data}", str(data)],
        {**SHARED, "samples": 4},
        "exact",
        ["arithmetic.max_operand=9", "seed=5"],
    )
    arithmetic, nll, jsonl = (r.settings for r in requests)
    assert arithmetic.max_operand == 9 and arithmetic.samples == 4  # type: ignore[attr-defined]
    assert nll.dataset == str(data) and jsonl.dataset == str(data)  # type: ignore[attr-defined]
    assert jsonl.grader == "exact" and requests[2].task.name == "jsonl"  # type: ignore[attr-defined]
    assert {r.settings.seed for r in requests} == {5}


@pytest.mark.parametrize(
    ("specs", "grader", "overrides", "message"),
    [
        (["data.jsonl"], None, [], "task 'data.jsonl' needs a grader: --grader math|exact|module:function"),
        (["data.jsonl"], "nope:fn", [], "grader 'nope:fn': module 'nope' cannot be imported"),
        (["arithmetic"], None, ["arithmetic.max_opernd=3"], "unknown key 'max_opernd'; did you mean 'max_operand'"),
        (["arithmetic:x.jsonl"], None, [], "task 'arithmetic' takes no data file"),
        (["arithmetic"], None, ["arithmetic.max_operand=-1"], "max_operand"),
    ],
)
def test_bad_task_requests_are_config_errors(
    specs: list[str], grader: str | None, overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_tasks(specs, SHARED, grader, overrides)
