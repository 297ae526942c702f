"""guess_number: multi-turn RL. The policy guesses a secret number, the env says "Higher." or
"Lower.", and a game is won by finding it within `max_turns` guesses.

Defaults run on the embedded tiny model, offline, in two to three minutes of CPU time: a warm
start imitating a teacher who obeys the hints but halves the range only half of the time (else
guesses at random within it), then RL, which learns to search better than its teacher: the
sampled win rate rises from about 0.7 to about 0.85-0.95 over the 60 steps.
"""

from __future__ import annotations

from pydantic import Field

from kitchen.config import defaults
from kitchen.recipe import Recipe
from kitchen.rl.settings import RLSettings
from kitchen.rl.workflow import rl_workflow_for
from recipes.envs.guess_number import guess_number_task
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask


@defaults(
    learning_rate=1e-3,
    max_tokens=8,
    group_size=8,
    groups_per_batch=16,
    num_batches=60,
    eval_every=20,
    warm_start_steps=200,
)
class Config(RLSettings):
    max_number: int = Field(10, ge=1, description="the secret is drawn from [1, max_number]")
    max_turns: int = Field(4, ge=1, description="guesses per game")
    teacher_bisect_rate: float = Field(
        0.5, ge=0, le=1, description="share of warm-start guesses that halve the range (the rest are random)"
    )


def build_task(config: Config, renderer: Renderer) -> RLTask:
    return guess_number_task(
        renderer,
        num_batches=config.num_batches,
        groups_per_batch=config.groups_per_batch,
        group_size=config.group_size,
        max_number=config.max_number,
        max_turns=config.max_turns,
        seed=config.seed,
        teacher_bisect_rate=config.teacher_bisect_rate,
    )


RECIPE = Recipe(
    name="guess_number",
    description="multi-turn RL: guess a number from higher/lower hints",
    config_cls=Config,
    workflow=rl_workflow_for(build_task),
)
