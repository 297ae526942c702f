"""rubric_rl: RL rewarded by an LLM grader. Each prompt carries a score rubric (Feedback-Collection
format, `env.dataset`); a grader model (`grader.model`: any model the backend serves, or by
default the run's base model, untrained) grades each reply against the rubric through a
Prometheus-style grading prompt, and the parsed score 1-5 is the reward, mapped to [0, 1]. A
group's replies are graded in one request, each distinct reply once per run (cached), and the
reply cannot steer its own grading (`recipes.envs.rubric_grading`).

Defaults run on the embedded tiny model, offline, on CPU, with the shipped one-word-answer
questions: a warm start imitates the file's responses of every score, then RL. The untrained tiny
model cannot grade, so the learning run grades by rule (`grader.rule=reference_match`); with a
real grader set `grader.model.model_name` (and `grader.max_tokens`). See
docs/how-to/rubric-rewards.md.
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.rl import RLLoopSettings, RLSettings, WarmStartSettings, rl_workflow_for
from recipes.envs.rubric import RubricSettings, check_rubric_data, rubric_task
from recipes.envs.rubric_grading import GraderSettings
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask


@defaults(
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=8),
    rl=RLLoopSettings(group_size=8, groups_per_batch=8, num_batches=30),
    eval=HeldOutEval(every=10),
    warm_start=WarmStartSettings(steps=200),
)
class Config(RLSettings):
    env: RubricSettings = Field(default_factory=RubricSettings, description="the prompts and their rubrics")
    grader: GraderSettings = Field(default_factory=GraderSettings, description="the model that grades the replies")


def build_task(config: Config, renderer: Renderer) -> RLTask:
    return rubric_task(config.env, config.grader, config, renderer)


def check_data(config: Config, roles: frozenset[str]) -> None:
    check_rubric_data(config.env)


RECIPE = Recipe(
    name="rubric_rl",
    description="RL rewarded by an LLM grader scoring each reply against its prompt's rubric (Feedback-Collection)",
    config_cls=Config,
    workflow=rl_workflow_for(build_task, check_data),
)
