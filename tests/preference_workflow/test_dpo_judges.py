"""The polite_arithmetic judge: agrees with every shipped label, is antisymmetric, and refuses
questions it cannot read."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kitchen.engine.errors import ConfigError, DataError
from recipes.data import shipped_data
from recipes.data.preference.generate_polite_arithmetic import POLITE_CLOSINGS, RUDE_CLOSINGS
from recipes.judges import PoliteArithmeticJudge, get_judge
from train_core.preference.datasets import load_comparisons
from train_core.renderers.base import Message

JUDGE = PoliteArithmeticJudge()


def _reply(text: str) -> Message:
    return Message(role="assistant", content=text)


@pytest.mark.parametrize("split", ["train", "test"])
def test_judge_prefers_every_shipped_chosen_completion(split: str) -> None:
    comparisons, _ = load_comparisons(shipped_data(f"preference/polite_arithmetic_{split}.jsonl"), "comparisons")
    for labeled in comparisons:
        prompt = labeled.comparison.prompt_conversation
        chosen, rejected = labeled.chosen_and_rejected()
        assert JUDGE(prompt, rejected[0], chosen[0]) == 1.0, (prompt, chosen, rejected)
        assert JUDGE(prompt, chosen[0], rejected[0]) == -1.0


@pytest.mark.parametrize(
    ("question", "answer"),
    [("What is 12 + 30?", 42), ("Can you add 7 and 8?", 15), ("What is 90 - 91?", -1), ("Which is larger, 3 or 9?", 9)],
)
def test_judge_reads_each_question_form(question: str, answer: int) -> None:
    prompt = [Message(role="user", content=question)]
    assert JUDGE.answer(prompt) == answer
    assert JUDGE(prompt, _reply(f"The answer is {answer + 1}."), _reply(f"The answer is {answer}.")) == 1.0


pieces = st.lists(st.sampled_from(["The answer is 5.", "The answer is 6.", *POLITE_CLOSINGS, *RUDE_CLOSINGS, "hm"]))


@given(a=pieces, b=pieces)
def test_judge_is_antisymmetric_and_ties_itself(a: list[str], b: list[str]) -> None:
    prompt = [Message(role="user", content="What is 2 + 3?")]
    reply_a, reply_b = _reply(" ".join(a)), _reply(" ".join(b))
    assert JUDGE(prompt, reply_a, reply_b) == -JUDGE(prompt, reply_b, reply_a)
    assert JUDGE(prompt, reply_a, reply_a) == 0.0
    assert JUDGE(prompt, reply_a, reply_b) in (-1.0, 0.0, 1.0)


def test_judge_refuses_other_questions() -> None:
    with pytest.raises(DataError, match=r"cannot read the question 'Tell me a joke\.'"):
        JUDGE([Message(role="user", content="Tell me a joke.")], _reply("a"), _reply("b"))


def test_unknown_judge_name() -> None:
    with pytest.raises(ConfigError, match=re.escape("unknown judge 'gpt' (available: polite_arithmetic, shorter)")):
        get_judge("gpt")
