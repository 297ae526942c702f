"""guess_number: multi-turn RL. The policy guesses a secret number, the env says "Higher." or
"Lower.", and a game is won by finding it within `max_turns` guesses.

Defaults run on the embedded tiny model, offline, in two to three minutes of CPU time: a warm
start imitating a teacher who obeys the hints but halves the range only half of the time (else
guesses at random within it), then RL, which learns to search better than its teacher: the win
rate over every secret rises from about 0.6 to about 0.8 over the 60 steps.
"""

from __future__ import annotations

from kitchen.engine.config.loading import defaults
from kitchen.engine.recipe import Recipe
from kitchen.families.rl.settings import RLSettings
from kitchen.families.rl.workflow import rl_workflow_for
from recipes.envs.guess_number import ENV, GuessNumberSettings
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
class Config(RLSettings, GuessNumberSettings):
    pass


def build_task(config: Config, renderer: Renderer) -> RLTask:
    return ENV.build_task(config, config, renderer)


RECIPE = Recipe(
    name="guess_number",
    description="multi-turn RL: guess a number from higher/lower hints",
    config_cls=Config,
    workflow=rl_workflow_for(build_task),
)
