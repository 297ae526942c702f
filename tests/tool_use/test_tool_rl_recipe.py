"""The tool_rl recipe's pieces: the calculator, the teacher's demonstrations, and the renderer
check at validation."""

from __future__ import annotations

import asyncio
import random

import pytest
from transformers import AutoTokenizer

from adapters.common.tiny import TINY_DIR
from kitchen.apps.cli import main
from kitchen.integrations.tools import PARSE_ERROR_MESSAGE, Toolbox
from recipes.envs.calculator import Problem, TeacherEpisodes, calculator, grade
from train_core.renderers import Message, get_renderer


@pytest.mark.parametrize(("expression", "value"), [("482 * 917", "441994"), ("-3 + 4 - 10", "-9"), ("2*3+1", "7")])
def test_the_calculator_is_exact(expression: str, value: str) -> None:
    assert asyncio.run(calculator.call({"expression": expression})).text == value


@pytest.mark.parametrize("expression", ["__import__('os')", "2 ** 99999999", "1 / 0", "4 +"])
def test_the_calculator_refuses_anything_else(expression: str) -> None:
    result = asyncio.run(calculator.call({"expression": expression}))
    assert result.kind == "failed" and result.text.startswith("Error: calculator failed: ValueError")


def test_the_grade_is_the_exact_answer_plus_a_bonus_for_the_share_of_calls_accepted() -> None:
    grader = grade(Problem(48, "*", 91), tool_bonus=0.5)
    question = Message(role="user", content="What is 48 * 91?")
    call = Message(role="assistant", content="")
    accepted = [question, call, Message(role="tool", content="4368")]
    rejected = [question, call, Message(role="tool", content="Error: invalid")]
    unparsed = [
        question,
        Message(role="assistant", content="<tool_call>{"),
        Message(role="user", content=PARSE_ERROR_MESSAGE),
    ]
    assert grader([*accepted, Message(role="assistant", content="4368")]) == (
        1.5,
        {"correct": 1.0, "used_calculator": 1.0, "accepted": 1.0},
    )
    assert grader([*rejected, Message(role="assistant", content="4368")]) == (
        1.0,
        {"correct": 1.0, "used_calculator": 0.0, "accepted": 0.0},
    )
    assert grader([*accepted, Message(role="assistant", content="4369")]) == (
        0.5,
        {"correct": 0.0, "used_calculator": 1.0, "accepted": 1.0},
    )
    assert grader(accepted)[0] == 0.5  # out of turns after the call: no answer
    # a retry after an invalid or unreadable call earns half the bonus: more attempts do not buy it
    assert grader([*rejected, *accepted[1:], Message(role="assistant", content="1")])[0] == 0.25
    assert grader([*unparsed, *accepted[1:], Message(role="assistant", content="1")])[0] == 0.25
    assert grader([question, Message(role="assistant", content="4368")]) == (
        1.0,
        {"correct": 1.0, "used_calculator": 0.0, "accepted": 0.0},
    )


def test_the_teacher_slips_with_an_invalid_call_then_guesses() -> None:
    renderer = get_renderer("qwen3_instruct", AutoTokenizer.from_pretrained(TINY_DIR))
    episodes = TeacherEpisodes(renderer, Toolbox([calculator]), digits=3, error_rate=0.5)(random.Random(0), 40)
    slips = [e for e in episodes if "expr" in e[2]["tool_calls"][0]["arguments"]]
    assert 0 < len(slips) < len(episodes)
    for episode in episodes:
        assert episode[0]["role"] == "system" and '"name": "calculator"' in episode[0]["content"]
        problem = episode[1]["content"].removeprefix("What is ").removesuffix("?")
        correct = str(eval(problem))
        slipped = episode in slips
        assert episode[3]["content"].startswith("Error: invalid arguments") == slipped
        assert (episode[4]["content"] == correct) != slipped


def test_a_renderer_without_a_tool_format_is_refused_at_validation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "tool_rl", "renderer=role_colon"]) == 2
    err = capsys.readouterr().err
    assert "renderer 'role_colon' has no native tool format" in err and "Traceback" not in err
    assert main(["validate", "tool_rl", "--config", "recipes/configs/tool_rl.yaml"]) == 0
