"""distill_on_policy: on-policy distillation. The student samples replies to prompts (reward 0),
each prompt set's teacher scores the sampled tokens, and the student is trained to lower its
reverse KL to the teacher, in any RL mode (sync, stream_minibatch, async).

Defaults run offline on the embedded tiny model in a few minutes: the student gets the sloppy
warm start of `math_rl` (held-out reward about 0.35), the teacher is the shipped arithmetic
teacher (`recipes/data/teachers/arithmetic`, about 1.0), and the student trains on addition
problems; its reward and its KL to the teacher are evaluated on every problem, and separately
(`eval/held_out/...`, `eval/teacher_kl/held_out`) on the ones it never trains on.
`datasets` takes several prompt sets with their own teachers (see
`recipes/configs/distill_on_policy_multi.yaml`).
"""

from __future__ import annotations

import random

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, Section, defaults, is_hub_name
from kitchen.families.distillation import (
    OnPolicyDistillationSettings,
    load_prompts,
    on_policy_distillation_workflow_for,
)
from kitchen.families.rl import RLLoopSettings, WarmStartSettings
from recipes.data import shipped_data
from recipes.envs.arithmetic import AdditionDemonstrations, Problem, problem_group, question
from train_core.distillation import CompositeDataset, PromptDataset
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.task import RLTask

TEACHER = shipped_data("teachers/arithmetic")
"""Sampler weights of the tiny model trained on correct additions (see build_arithmetic_teacher.py)."""

ARITHMETIC = "arithmetic"
"""The built-in prompt set: addition problems with operands up to `max_operand`, less the held-out ones."""


class AdditionPrompts(Section):
    """Config section `env`: the built-in addition problems, those held out, the warm start."""

    max_operand: int = Field(4, ge=1, description="built-in prompts: operands are drawn from [0, max_operand]")
    num_held_out: int = Field(5, ge=1, description="addition problems kept out of training (eval tag held_out)")
    teacher_error_rate: float = Field(
        0.4, ge=0, le=1, description="the student's warm start: share of demonstrations that are off by one"
    )


@defaults(
    datasets=[{"name": ARITHMETIC, "prompts": ARITHMETIC, "teacher": {"checkpoint": TEACHER}}],
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=8),
    rl=RLLoopSettings(group_size=8, groups_per_batch=32, num_batches=40),
    eval=HeldOutEval(every=5),
    warm_start=WarmStartSettings(steps=300),
)
class Config(OnPolicyDistillationSettings):
    env: AdditionPrompts = Field(default_factory=AdditionPrompts, description="the built-in addition problems")


def split_problems(config: Config) -> tuple[list[Problem], list[Problem]]:
    """Every addition problem of the range, split into (trained, held out) by a seeded sample."""
    top, count = config.env.max_operand, config.env.num_held_out
    every = [(x, y) for x in range(top + 1) for y in range(top + 1)]
    held_out = random.Random(f"distill-held-out/{config.seed}").sample(every, min(count, len(every) - 1))
    return [p for p in every if p not in held_out], held_out


def prompts_for(source: str, trained: list[Problem], roles: frozenset[str]) -> list[list[Message]]:
    if source == ARITHMETIC:
        return [[{"role": "user", "content": question(problem)}] for problem in trained]
    return load_prompts(source, roles)


def check_prompts(config: Config, roles: frozenset[str]) -> None:
    """The local prompt sets' records, before anything starts."""
    for dataset in config.datasets:
        if dataset.prompts != ARITHMETIC and not is_hub_name(dataset.prompts):
            load_prompts(dataset.prompts, roles)


def build_task(config: Config, renderer: Renderer) -> RLTask:
    trained, held_out = split_problems(config)
    parts = [
        PromptDataset(
            dataset.name,
            prompts_for(dataset.prompts, trained, renderer.roles),
            renderer,
            config.share(index),
            config.rl.group_size,
            config.seed,
        )
        for index, dataset in enumerate(config.datasets)
    ]
    # The task reward is measured on every problem; the held-out ones (tag `held_out`) also show
    # how the student does against the teacher on prompts it never trained on.
    trained_set = set(trained)
    return RLTask(
        train=CompositeDataset(parts),
        eval_builders=[
            problem_group(
                problem, renderer, config.rl.group_size, 0.0, "trained" if problem in trained_set else "held_out"
            )
            for problem in sorted(trained_set | set(held_out))
        ],
        demonstrations=AdditionDemonstrations(config.env.max_operand, config.env.teacher_error_rate),
    )


RECIPE = Recipe(
    name="distill_on_policy",
    description="on-policy distillation: the student trains on its own samples against teachers' logprobs",
    config_cls=Config,
    workflow=on_policy_distillation_workflow_for(build_task, check_prompts),
)
