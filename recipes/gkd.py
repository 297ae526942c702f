"""gkd: generalized knowledge distillation (TRL's GKDTrainer). Per batch, the completions are the
student's own samples (`gkd.lmbda` of the batches), the teacher's (`gkd.seq_kd`) or the data set's;
the student is trained on the generalized JSD (`gkd.beta`) to the teacher's next-token
distribution over the teacher's top-K at every completion position.

Defaults run offline on the embedded tiny model: the student gets the sloppy warm start of
`math_rl` (answers off by one `env.teacher_error_rate` of the time), the teacher is the shipped
arithmetic teacher (`recipes/data/teachers/arithmetic`), and the data set is the addition
problems with their correct sums. `eval/gkd_jsd`, the student's divergence to the teacher on the
held-out problems' completions (never trained on), falls; `eval/all/reward/total` is the student's
held-out reward.
"""

from __future__ import annotations

import random

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, Section, defaults
from kitchen.families.distillation import GKDSection, GKDSettings, gkd_workflow_for
from kitchen.families.rl import RLLoopSettings, WarmStartSettings
from recipes.data import shipped_data
from recipes.envs.arithmetic import AdditionDemonstrations, Problem, problem_group, question
from train_core.gkd import CompletionGroupBuilder
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, RLDataset

TEACHER = shipped_data("teachers/arithmetic")
"""Sampler weights of the tiny model trained on correct additions (see build_arithmetic_teacher.py)."""


class AdditionData(Section):
    """Config section `env`: the addition problems (the data set: each with its sum), those held
    out, and the student's warm start."""

    max_operand: int = Field(4, ge=1, description="operands are drawn from [0, max_operand]")
    num_held_out: int = Field(8, ge=1, description="problems kept out of training (the eval/gkd_jsd set)")
    teacher_error_rate: float = Field(
        0.4, ge=0, le=1, description="the student's warm start: share of demonstrations that are off by one"
    )


@defaults(
    gkd=GKDSection.model_validate({"teacher": {"checkpoint": TEACHER}, "topk": 16}),
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=6, temperature=0.9),
    rl=RLLoopSettings(group_size=2, groups_per_batch=16, num_batches=30),
    eval=HeldOutEval(every=10),
    warm_start=WarmStartSettings(steps=300),
)
class Config(GKDSettings):
    env: AdditionData = Field(default_factory=AdditionData, description="the addition problems")


def split_problems(config: Config) -> tuple[list[Problem], list[Problem]]:
    """Every addition problem of the range, split into (trained, held out) by a seeded sample."""
    top, count = config.env.max_operand, config.env.num_held_out
    every = [(x, y) for x in range(top + 1) for y in range(top + 1)]
    held_out = random.Random(f"gkd-held-out/{config.seed}").sample(every, min(count, len(every) - 1))
    return [p for p in every if p not in held_out], held_out


def example(problem: Problem, renderer: Renderer, group_size: int, tag: str) -> CompletionGroupBuilder:
    """A problem with its correct sum as the data set's completion."""
    prompt = (Message(role="user", content=question(problem)),)
    return CompletionGroupBuilder(problem_group(problem, renderer, group_size, 0.0, tag), prompt, str(sum(problem)))


class AdditionExamples(RLDataset):
    """Batches of `rl.groups_per_batch` trained problems, seeded per batch."""

    def __init__(self, config: Config, problems: list[Problem], renderer: Renderer) -> None:
        self.config, self.problems, self.renderer = config, problems, renderer

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"gkd/{self.config.seed}/{index}")
        picked = [rng.choice(self.problems) for _ in range(self.config.rl.groups_per_batch)]
        return [example(p, self.renderer, self.config.rl.group_size, "trained") for p in picked]

    def __len__(self) -> int:
        return self.config.rl.num_batches


def build_task(config: Config, renderer: Renderer) -> RLTask:
    trained, held_out = split_problems(config)
    return RLTask(
        train=AdditionExamples(config, trained, renderer),
        eval_builders=[example(p, renderer, config.rl.group_size, "held_out") for p in held_out],
        demonstrations=AdditionDemonstrations(config.env.max_operand, config.env.teacher_error_rate),
    )


RECIPE = Recipe(
    name="gkd",
    description="generalized knowledge distillation: generalized JSD to a teacher on mixed completion sources",
    config_cls=Config,
    workflow=gkd_workflow_for(build_task),
)
