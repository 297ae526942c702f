"""ProblemEnv rewards through a real renderer (role_colon) and the embedded tiny tokenizer."""

from __future__ import annotations

import asyncio
from functools import cache
from typing import cast

import pytest
from transformers import AutoTokenizer

from adapters.common.tiny import TINY_DIR
from train_core.renderers import Renderer, Tokenizer, get_renderer
from train_core.renderers.messages import Message
from train_core.rl.math_grading import extract_boxed, grade_answer
from train_core.rl.problem_env import ProblemEnv, ProblemGroupBuilder
from train_core.rl.rollouts import do_group_rollout
from train_core.types import ModelInput, StopCondition, TokensWithLogprobs


@cache
def renderer() -> Renderer:
    # HF declares decode() -> str | list[str]; for a flat id list it is a str, as Tokenizer says.
    return get_renderer("role_colon", cast(Tokenizer, AutoTokenizer.from_pretrained(TINY_DIR)))


def encode(text: str) -> list[int]:
    return list(renderer().tokenizer.encode(text, add_special_tokens=False))


class AdditionEnv(ProblemEnv):
    """What is a + b? Answer in \\boxed{}."""

    def __init__(self, a: int, b: int, convo_prefix: list[Message] | None = None) -> None:
        super().__init__(renderer(), convo_prefix or [], format_coef=0.1)
        self.a, self.b = a, b

    def get_question(self) -> str:
        return f"What is {self.a}+{self.b}?"

    def check_answer(self, response: str) -> bool:
        return grade_answer(response, self.get_reference_answer())

    def check_format(self, response: str) -> bool:
        return extract_boxed(response) is not None

    def get_reference_answer(self) -> str:
        return str(self.a + self.b)


def test_initial_observation_renders_the_question_as_a_user_message() -> None:
    ob, stop = asyncio.run(AdditionEnv(2, 3).initial_observation())
    assert renderer().tokenizer.decode(ob.to_ints()) == "User: What is 2+3?\n\nAssistant:"
    assert stop == ["\n\nUser:"]


def test_conversation_prefix_comes_before_the_question() -> None:
    prefix: list[Message] = [{"role": "system", "content": "Answer in \\boxed{}."}]
    ob, _ = asyncio.run(AdditionEnv(2, 3, prefix).initial_observation())
    assert ob == renderer().build_generation_prompt([*prefix, {"role": "user", "content": "What is 2+3?"}])


@pytest.mark.parametrize(
    ("reply", "reward", "format_ok", "correct"),
    [
        (" It is \\boxed{5}\n\nUser:", 1.0, 1.0, 1.0),
        (" It is 5\n\nUser:", 0.9, 0.0, 1.0),  # right answer, no box: loses the format coefficient
        (" It is \\boxed{5}", 0.9, 0.0, 1.0),  # cut off before the stop string: parse failed
        (" It is \\boxed{6}\n\nUser:", 0.0, 1.0, 0.0),
        (" no idea\n\nUser:", -0.1, 0.0, 0.0),
    ],
)
def test_step_reward_is_format_penalty_plus_correctness(
    reply: str, reward: float, format_ok: float, correct: float
) -> None:
    result = asyncio.run(AdditionEnv(2, 3).step(encode(reply)))
    assert result.reward == pytest.approx(reward)
    assert result.metrics == {"format": format_ok, "correct": correct}
    assert result.episode_done
    assert result.next_observation == ModelInput.empty()
    assert result.next_stop_condition == ["\n\nUser:"]


def test_group_builder_rolls_out_fresh_envs_under_its_dataset_tag() -> None:
    made: list[AdditionEnv] = []

    def thunk() -> AdditionEnv:
        made.append(AdditionEnv(2, 3))
        return made[-1]

    builder = ProblemGroupBuilder(thunk, num_envs=3, dataset_name="addition")
    replies = iter([" \\boxed{5}\n\nUser:", " \\boxed{4}\n\nUser:", " 5\n\nUser:"])

    async def policy(ob: ModelInput, stop: StopCondition) -> TokensWithLogprobs:
        tokens = encode(next(replies))
        return TokensWithLogprobs(tokens, [-1.0] * len(tokens))

    group = asyncio.run(do_group_rollout(builder, policy))
    assert len({id(env) for env in made}) == 3
    assert group.get_total_rewards() == pytest.approx([1.0, 0.0, 0.9])
    assert group.final_rewards_G == [0.0, 0.0, 0.0]
    assert builder.logging_tags() == ["addition"]
