"""text_arena: two-player text games (textarena's tic-tac-toe by default, any two-player
textarena game by `env.game`) learnt by self-play: both seats are the policy, a group is one game,
rewards are zero-sum (+1 / -1 / 0) and invalid moves cost `env.invalid_move_penalty`. With
`env.opponent=random` or `env.opponent=model` (`env.opponent_model`) the policy plays a fixed
opponent instead.

Self-play's mean reward is zero by construction, so learning is measured against a fixed
opponent: `env.eval_games` held-out games against a random player (`env.eval_opponent`), half in
each seat: `eval/all/won` is the win rate, `eval/all/invalid_moves` the invalid moves per game.

Defaults run on the embedded tiny model, offline, on CPU: a warm start imitating a scripted
tic-tac-toe player (win, else block, else centre, corner, side; `env.teacher`), then self-play
RL. On the tiny model this is not yet shown to learn: RL did not raise the win rate against
random, even when trained against the random player itself (measured in
docs/how-to/text-games.md).
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.rl import (
    AlgorithmSettings,
    RLLoopSettings,
    RLSettings,
    WarmStartSettings,
    env_check,
    env_task,
    rl_workflow_for,
)
from recipes.envs.text_arena import ENV, TextArenaSettings


@defaults(
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=8),
    rl=RLLoopSettings(group_size=8, groups_per_batch=8, num_batches=30),
    algorithm=AlgorithmSettings(loss_aggregation="seq_mean_token_mean"),
    eval=HeldOutEval(every=30),
    warm_start=WarmStartSettings(steps=150, batch_size=8),
)
class Config(RLSettings):
    env: TextArenaSettings = Field(default_factory=TextArenaSettings, description="the game and the opponent")


RECIPE = Recipe(
    name="text_arena",
    description="two-player text games (textarena): self-play, or a fixed opponent; win rate against a random player",
    config_cls=Config,
    workflow=rl_workflow_for(env_task({"text_arena": ENV}), env_check({"text_arena": ENV})),
)
