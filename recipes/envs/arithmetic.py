"""Generated addition problems ("What is 3 + 4?"), graded on the last number or `\\boxed{}`.

Problems are a pure function of (seed, batch index), so a dataset needs no files and a resumed
run sees the same problems.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from typing import Literal

from pydantic import Field

from kitchen.families.rl import EnvSpec, RLSettings
from recipes.envs.settings import ProblemSettings
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.math_grading import extract_answer, grade_answer
from train_core.rl.problem_env import ProblemEnv, ProblemGroupBuilder
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, RLDataset

Problem = tuple[int, int]


def question(problem: Problem) -> str:
    x, y = problem
    return f"What is {x} + {y}?"


class ArithmeticEnv(ProblemEnv):
    """One addition problem; any reply whose final number (or boxed answer) is the sum is correct."""

    def __init__(self, problem: Problem, renderer: Renderer, format_coef: float = 0.0) -> None:
        super().__init__(renderer, format_coef=format_coef)
        self.problem = problem

    def get_question(self) -> str:
        return question(self.problem)

    def check_answer(self, response: str) -> bool:
        return grade_answer(response, self.get_reference_answer())

    def check_format(self, response: str) -> bool:
        return extract_answer(response) is not None

    def get_reference_answer(self) -> str:
        return str(sum(self.problem))


def random_problem(rng: random.Random, max_operand: int) -> Problem:
    return rng.randint(0, max_operand), rng.randint(0, max_operand)


def problem_group(
    problem: Problem, renderer: Renderer, group_size: int, format_coef: float, tag: str = "arithmetic"
) -> EnvGroupBuilder:
    return ProblemGroupBuilder(partial(ArithmeticEnv, problem, renderer, format_coef), group_size, tag)


class ArithmeticDataset(RLDataset):
    """`num_batches` batches of `groups_per_batch` random problems with operands in [0, max_operand]."""

    def __init__(
        self,
        renderer: Renderer,
        num_batches: int,
        groups_per_batch: int,
        group_size: int,
        max_operand: int,
        seed: int,
        format_coef: float = 0.0,
    ) -> None:
        self.renderer = renderer
        self.num_batches = num_batches
        self.groups_per_batch = groups_per_batch
        self.group_size = group_size
        self.max_operand = max_operand
        self.seed = seed
        self.format_coef = format_coef

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"arithmetic/{self.seed}/{index}")
        return [
            problem_group(random_problem(rng, self.max_operand), self.renderer, self.group_size, self.format_coef)
            for _ in range(self.groups_per_batch)
        ]

    def __len__(self) -> int:
        return self.num_batches


def eval_problems(max_operand: int, count: int, seed: int) -> list[Problem]:
    """Every problem when there are at most `count`, else a seeded sample of `count`."""
    every = [(x, y) for x in range(max_operand + 1) for y in range(max_operand + 1)]
    return every if len(every) <= count else random.Random(f"arithmetic-eval/{seed}").sample(every, count)


@dataclass(frozen=True)
class AdditionDemonstrations:
    """Random problems answered by a sloppy teacher: with probability `error_rate` its answer is
    one too high. Imitating it gives a model that knows how to add but repeats the teacher's
    slips; RL, rewarded only for correct sums, can then do better than its teacher."""

    max_operand: int
    error_rate: float = 0.0

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        conversations = []
        for _ in range(count):
            problem = random_problem(rng, self.max_operand)
            slip = rng.random() < self.error_rate
            conversations.append(
                [
                    Message(role="user", content=question(problem)),
                    Message(role="assistant", content=str(sum(problem) + slip)),
                ]
            )
        return conversations


def arithmetic_task(
    renderer: Renderer,
    *,
    num_batches: int,
    groups_per_batch: int,
    group_size: int,
    max_operand: int,
    num_eval_problems: int,
    seed: int,
    format_coef: float = 0.0,
    teacher_error_rate: float = 0.0,
) -> RLTask:
    dataset = ArithmeticDataset(renderer, num_batches, groups_per_batch, group_size, max_operand, seed, format_coef)
    eval_builders = [
        problem_group(problem, renderer, group_size, format_coef)
        for problem in eval_problems(max_operand, num_eval_problems, seed)
    ]
    return RLTask(
        train=dataset,
        eval_builders=eval_builders,
        demonstrations=AdditionDemonstrations(max_operand, teacher_error_rate),
    )


class ArithmeticSettings(ProblemSettings):
    name: Literal["arithmetic"] = Field("arithmetic", description="generated additions")
    max_operand: int = Field(4, ge=0, description="operands are drawn from [0, max_operand]")
    num_eval_problems: int = Field(32, ge=0, description="size of the held-out set")
    teacher_error_rate: float = Field(0.4, ge=0, le=1, description="share of warm-start answers that are off by one")


def build_arithmetic_task(settings: ArithmeticSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    return arithmetic_task(
        renderer,
        num_batches=config.rl.num_batches,
        groups_per_batch=config.rl.groups_per_batch,
        group_size=config.rl.group_size,
        max_operand=settings.max_operand,
        num_eval_problems=settings.num_eval_problems,
        seed=config.seed,
        format_coef=settings.format_coef,
        teacher_error_rate=settings.teacher_error_rate,
    )


ENV = EnvSpec(
    "generated additions 'What is a + b?', graded on the final number", ArithmeticSettings, build_arithmetic_task
)
