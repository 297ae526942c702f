"""Grade-school word problems in GSM8K's JSONL format: `question`, and `answer` holding a worked
solution whose final answer follows `####`. Replies are graded on their last `\\boxed{}` or,
failing that, their last number."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from pydantic import Field

from kitchen import RESUME_SAFE, DataError, build_all
from kitchen.families.rl import EnvSpec, RLSettings
from recipes.data import shipped_data
from recipes.envs.settings import ProblemSettings
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.math_grading import extract_answer, grade_answer, parse_gsm8k_answer
from train_core.rl.problem_env import ProblemEnv, ProblemGroupBuilder
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, RLDataset

INSTRUCTION = " Give your final answer as \\boxed{answer}."
_CALCULATOR = re.compile(r"<<[^<>]*>>")


@dataclass(frozen=True)
class WordProblem:
    question: str
    solution: str
    """The worked solution with its `####` line, as in the file."""
    answer: str
    """The final answer (after `####`, thousands commas removed)."""

    def demonstration(self) -> list[Message]:
        """The solution as a reply: calculator notes dropped, the final answer boxed."""
        steps = _CALCULATOR.sub("", self.solution[: self.solution.rfind("####")]).strip()
        reply = f"{steps}\nThe answer is \\boxed{{{self.answer}}}." if steps else f"\\boxed{{{self.answer}}}"
        return [Message(role="user", content=self.question + INSTRUCTION), Message(role="assistant", content=reply)]


def word_problem(where: str, record: Any) -> WordProblem:
    """One GSM8K record as a problem; a bad one is a DataError naming `where`."""
    if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("question", "answer")):
        raise DataError(f"{where}: expected an object with string keys 'question' and 'answer'")
    answer = parse_gsm8k_answer(record["answer"], where=f"{where} key 'answer'")
    return WordProblem(record["question"], record["answer"], answer)


def load_word_problems(path: str) -> Sequence[WordProblem]:
    """Every record of a GSM8K-format file (JSONL, parquet, a saved dataset), each checked here and
    read back from its cache when used, so memory does not grow with the file."""
    return build_all(path, word_problem)


class WordProblemEnv(ProblemEnv):
    """One word problem; the format check asks that the reply states some final answer."""

    def __init__(self, problem: WordProblem, renderer: Renderer, format_coef: float = 0.0) -> None:
        super().__init__(renderer, format_coef=format_coef)
        self.problem = problem

    def get_question(self) -> str:
        return self.problem.question + INSTRUCTION

    def check_answer(self, response: str) -> bool:
        return grade_answer(response, self.problem.answer)

    def check_format(self, response: str) -> bool:
        return extract_answer(response) is not None

    def get_reference_answer(self) -> str:
        return self.problem.answer


def problem_group(problem: WordProblem, renderer: Renderer, group_size: int, format_coef: float) -> EnvGroupBuilder:
    return ProblemGroupBuilder(partial(WordProblemEnv, problem, renderer, format_coef), group_size, "gsm8k")


class WordProblemDataset(RLDataset):
    """Batches of `groups_per_batch` problems: a seeded shuffle per epoch, batches drawn in order
    and wrapping around the end, so every batch is full however few problems there are."""

    def __init__(
        self,
        problems: Sequence[WordProblem],
        renderer: Renderer,
        groups_per_batch: int,
        group_size: int,
        seed: int,
        format_coef: float = 0.0,
    ) -> None:
        self.problems = problems
        self.renderer = renderer
        self.groups_per_batch = groups_per_batch
        self.group_size = group_size
        self.seed = seed
        self.format_coef = format_coef

    def _problem(self, position: int) -> WordProblem:
        epoch, offset = divmod(position, len(self.problems))
        order = list(range(len(self.problems)))
        random.Random(f"gsm8k/{self.seed}/{epoch}").shuffle(order)
        return self.problems[order[offset]]

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        start = index * self.groups_per_batch
        return [
            problem_group(self._problem(start + k), self.renderer, self.group_size, self.format_coef)
            for k in range(self.groups_per_batch)
        ]

    def __len__(self) -> int:
        """Batches per epoch, at least one."""
        return max(1, len(self.problems) // self.groups_per_batch)


@dataclass(frozen=True)
class SolutionDemonstrations:
    """The training problems' worked solutions, drawn at random, for the warm start."""

    problems: Sequence[WordProblem]

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        return [rng.choice(self.problems).demonstration() for _ in range(count)]


def word_problem_task(
    renderer: Renderer,
    *,
    dataset: str,
    eval_dataset: str | None,
    groups_per_batch: int,
    group_size: int,
    seed: int,
    format_coef: float = 0.0,
) -> RLTask:
    problems = load_word_problems(dataset)
    eval_problems = load_word_problems(eval_dataset) if eval_dataset else []
    return RLTask(
        train=WordProblemDataset(problems, renderer, groups_per_batch, group_size, seed, format_coef),
        eval_builders=[problem_group(p, renderer, group_size, format_coef) for p in eval_problems],
        demonstrations=SolutionDemonstrations(problems),
    )


class WordProblemSettings(ProblemSettings):
    name: Literal["gsm8k"] = Field("gsm8k", description="grade-school word problems from a file")
    dataset: str = Field(
        default_factory=lambda: shipped_data("gsm8k_sample/train.jsonl"),
        description="JSONL with 'question' and 'answer' (final answer after '####')",
    )
    eval_dataset: str | None = Field(
        default_factory=lambda: shipped_data("gsm8k_sample/test.jsonl"),
        description="held-out problems",
        json_schema_extra=RESUME_SAFE,
    )


def build_word_problem_task(settings: WordProblemSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    return word_problem_task(
        renderer,
        dataset=settings.dataset,
        eval_dataset=settings.eval_dataset,
        groups_per_batch=config.rl.groups_per_batch,
        group_size=config.rl.group_size,
        seed=config.seed,
        format_coef=settings.format_coef,
    )


def check_word_problems(settings: WordProblemSettings, roles: frozenset[str]) -> None:
    """The problem files, before anything starts."""
    for path in (settings.dataset, settings.eval_dataset):
        if path:
            load_word_problems(path)


ENV = EnvSpec(
    "grade-school word problems in GSM8K's JSONL format",
    WordProblemSettings,
    build_word_problem_task,
    check_word_problems,
)
