"""text_arena: two-player text games (textarena's tic-tac-toe by default, any two-player
textarena game by `env.game`) learnt against a fixed opponent: by default the random player
(`env.opponent=random`), a group being `rl.group_size` games from the same start and seat; with
`env.opponent=self` both seats are the policy (a group is one game, zero-sum rewards), with
`env.opponent=model` another model (`env.opponent_model`). A win is +1, a loss -1, and each
invalid move costs `env.invalid_move_penalty`.

Learning is measured against a fixed opponent (self-play's mean reward is zero by construction):
`env.eval_games` held-out games against a random player (`env.eval_opponent`), half in each seat:
`eval/all/won` is the win rate, `eval/all/invalid_moves` the invalid moves per game.

Defaults run on the embedded tiny model, offline, on CPU: each turn the policy sees the board
prompt (`env.prompt=board`: its mark, the board and the legal moves in five lines, read off the
game's observation), a warm start imitates a scripted tic-tac-toe player (win, else block, else
centre, corner, side; `env.teacher`), then 30 RL steps against the random player raise the
held-out win rate at every seed (measured in docs/how-to/text-games.md; asserted by
tests/e2e/test_text_arena.py).
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
    optimizer=OptimizerSettings(learning_rate=5e-4),
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
    description="two-player text games (textarena): against the random player, by self-play or against a model; "
    "win rate against a random player",
    config_cls=Config,
    workflow=rl_workflow_for(env_task({"text_arena": ENV}), env_check({"text_arena": ENV})),
)
