"""sdft: self-distillation fine-tuning. The model, shown a golden answer in its prompt, is the
teacher of itself without it: the student samples replies to plain questions, the frozen teacher
reads each reply after the demonstration prompt, and the student is trained by cross-entropy
against the teacher's renormalised top-K next-token distributions (`sdft.topk`).

Defaults run offline on the embedded tiny model. A randomly initialised model has no in-context
learning to distil, so a warm start gives it the two habits a pretrained model brings: answering
addition questions (as a sloppy teacher does, off by one `env.teacher_error_rate` of the time) and
using a worked example shown in the prompt (copying the demonstration's answer). The frozen teacher
then answers with the demonstration better than the student without it, and SDFT moves that into
the weights: the held-out reward (`eval/all/reward/total`, plain questions, no demonstration) rises
and `sdft/topk_kl` (the student's KL to the teacher's top-K) falls.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, Section, defaults
from kitchen.families.distillation import (
    SelfDistillationSection,
    SelfDistillationSettings,
    self_distillation_workflow_for,
)
from kitchen.families.rl import RLLoopSettings, WarmStartSettings
from recipes.envs.arithmetic import Problem, eval_problems, problem_group, question, random_problem
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, RLDataset
from train_core.self_distillation import DemonstratedGroupBuilder


class AdditionSettings(Section):
    """Config section `env`: the addition problems and the warm start's habits."""

    max_operand: int = Field(4, ge=1, description="operands are drawn from [0, max_operand]")
    num_eval_problems: int = Field(25, ge=1, description="plain questions scored every eval.every steps")
    teacher_error_rate: float = Field(
        0.4, ge=0, le=1, description="warm start: share of plain answers that are off by one"
    )


@defaults(
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=6),
    rl=RLLoopSettings(group_size=4, groups_per_batch=16, num_batches=30),
    eval=HeldOutEval(every=10),
    warm_start=WarmStartSettings(steps=300),
    sdft=SelfDistillationSection(topk=8, skip_first_tokens=0),
)
class Config(SelfDistillationSettings):
    env: AdditionSettings = Field(default_factory=AdditionSettings, description="the problems and the warm start")


class DemonstratedAdditions(RLDataset):
    """Random addition problems, each with its sum as the golden answer the teacher is shown."""

    def __init__(self, config: Config, renderer: Renderer) -> None:
        self.config, self.renderer = config, renderer

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"sdft/{self.config.seed}/{index}")
        problems = [random_problem(rng, self.config.env.max_operand) for _ in range(self.config.rl.groups_per_batch)]
        return [self._group(problem) for problem in problems]

    def _group(self, problem: Problem) -> EnvGroupBuilder:
        plain = problem_group(problem, self.renderer, self.config.rl.group_size, 0.0)
        return DemonstratedGroupBuilder(plain, question(problem), str(sum(problem)))

    def __len__(self) -> int:
        return self.config.rl.num_batches


@dataclass(frozen=True)
class WarmStartHabits:
    """Half plain questions answered by a sloppy teacher, half questions shown with a golden answer
    in the SDFT demonstration prompt and answered with it."""

    max_operand: int
    error_rate: float
    sdft: SelfDistillationSection

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        conversations = []
        for _ in range(count):
            problem = random_problem(rng, self.max_operand)
            answer = sum(problem)
            if rng.random() < 0.5:
                shown = self.sdft.demo_template.format(question=question(problem), golden_answer=answer)
                conversations.append(
                    [Message(role="user", content=shown), Message(role="assistant", content=str(answer))]
                )
            else:
                slip = rng.random() < self.error_rate
                conversations.append(
                    [
                        Message(role="user", content=question(problem)),
                        Message(role="assistant", content=str(answer + slip)),
                    ]
                )
        return conversations


def build_task(config: Config, renderer: Renderer) -> RLTask:
    env = config.env
    problems = eval_problems(env.max_operand, env.num_eval_problems, config.seed)
    return RLTask(
        train=DemonstratedAdditions(config, renderer),
        eval_builders=[problem_group(problem, renderer, config.rl.group_size, 0.0) for problem in problems],
        demonstrations=WarmStartHabits(env.max_operand, env.teacher_error_rate, config.sdft),
    )


RECIPE = Recipe(
    name="sdft",
    description="self-distillation fine-tuning: the model with a demonstration in its prompt teaches itself without",
    config_cls=Config,
    workflow=self_distillation_workflow_for(build_task),
)
