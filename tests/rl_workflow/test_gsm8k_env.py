"""GSM8K-format data: loading with precise errors, grading, demonstrations, epoch batches."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from recipes.data import shipped_data
from recipes.envs.gsm8k import SolutionDemonstrations, WordProblemDataset, WordProblemEnv, load_word_problems
from tests.rl_workflow.envs_common import renderer, reply_tokens
from train_core.errors import InvalidInputError
from train_core.rl.problem_env import ProblemGroupBuilder

R = renderer()
TRAIN = shipped_data("gsm8k_sample/train.jsonl")


def test_shipped_sample_loads_with_final_answers() -> None:
    problems = load_word_problems(TRAIN)
    assert len(problems) == 16
    assert problems[0].answer == "7"
    assert any(p.answer == "250" for p in problems)  # "1200 - 950" after removing the comma
    assert len(load_word_problems(shipped_data("gsm8k_sample/test.jsonl"))) == 8


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: invalid JSON"),
        ('{"question": "q"}', "line 2: expected an object with string keys 'question' and 'answer'"),
        ('{"question": "q", "answer": "no marker"}', "line 2 key 'answer': no '####' marker"),
    ],
)
def test_bad_records_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text('{"question": "q", "answer": "#### 1"}\n' + line + "\n")
    with pytest.raises(InvalidInputError, match=message):
        load_word_problems(str(path))


def test_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"absent\.jsonl: no such file"):
        load_word_problems(str(tmp_path / "absent.jsonl"))


def test_every_demonstration_earns_full_reward() -> None:
    for problem in load_word_problems(TRAIN):
        reply = problem.demonstration()[1]["content"]
        assert "<<" not in reply and f"\\boxed{{{problem.answer}}}" in reply
        result = asyncio.run(WordProblemEnv(problem, R).step(reply_tokens(R, reply)))
        assert result.reward == 1.0 and result.metrics == {"format": 1.0, "correct": 1.0}


def test_last_number_counts_when_nothing_is_boxed() -> None:
    problem = load_word_problems(TRAIN)[0]
    assert asyncio.run(WordProblemEnv(problem, R).step(reply_tokens(R, "I think 7"))).reward == 1.0
    assert asyncio.run(WordProblemEnv(problem, R).step(reply_tokens(R, "7 then 8"))).reward == 0.0


def test_each_epoch_visits_every_problem_once() -> None:
    problems = load_word_problems(TRAIN)
    dataset = WordProblemDataset(problems, R, groups_per_batch=4, group_size=2, seed=0)
    assert len(dataset) == 4
    seen = []
    for index in range(len(dataset)):
        for builder in dataset.get_batch(index):
            assert isinstance(builder, ProblemGroupBuilder)
            env = builder.env_thunk()
            assert isinstance(env, WordProblemEnv)
            seen.append(env.problem.question)
    assert sorted(seen) == sorted(p.question for p in problems)


def test_demonstrations_come_from_the_training_problems() -> None:
    problems = load_word_problems(TRAIN)
    conversations = SolutionDemonstrations(problems)(random.Random(0), 5)
    questions = {p.question for p in problems}
    assert all(c[0]["content"].split(" Give your final")[0] in questions for c in conversations)
