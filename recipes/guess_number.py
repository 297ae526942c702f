"""guess_number: multi-turn RL. The policy guesses a secret number, the env says "Higher." or
"Lower.", and a game is won by finding it within `env.max_turns` guesses.

Defaults run on the embedded tiny model, offline, in three to four minutes of CPU time: a warm
start imitating a teacher who obeys the hints but halves the range only half of the time (else
guesses at random within it), then RL, which learns to search better than its teacher: the win
rate over every secret rises from about 0.7 to about 0.93 over the 80 steps (seeds 0-2).

Each game is weighted equally (`seq_mean_token_mean`): lost games use every turn, so with
token sums their tokens outweigh the won games' and the tokens every reply shares (the end of a
turn) are pushed down step after step, until at higher learning rates the policy stops answering.
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.rl import (
    AlgorithmSettings,
    RLLoopSettings,
    RLSettings,
    WarmStartSettings,
    env_task,
    rl_workflow_for,
)
from recipes.envs.guess_number import ENV, GuessNumberSettings


@defaults(
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=8),
    rl=RLLoopSettings(group_size=8, groups_per_batch=16, num_batches=80),
    algorithm=AlgorithmSettings(loss_aggregation="seq_mean_token_mean"),
    eval=HeldOutEval(every=20),
    warm_start=WarmStartSettings(steps=200),
)
class Config(RLSettings):
    env: GuessNumberSettings = Field(default_factory=GuessNumberSettings, description="the guessing game")


RECIPE = Recipe(
    name="guess_number",
    description="multi-turn RL: guess a number from higher/lower hints",
    config_cls=Config,
    workflow=rl_workflow_for(env_task({"guess_number": ENV})),
)
