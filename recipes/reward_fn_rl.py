"""reward_fn_rl: RL without writing an env. A prompt data set and one or more reward functions
named as `module:function` (TRL's `reward_funcs`): each prompt is answered `rl.group_size` times
and each reply scored by `fn(prompt, completion, record)`; scores are numbers, or dicts of named
numbers summed with `env.reward_weights`. Runs in every RL mode. The environment is the RL
family's `reward_fn` (`kitchen.families.rl.reward_env`: the record formats are there).

Defaults: the shipped prompts and `recipes.rewards.examples:keyword_reward`.
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.rl import (
    REWARD_FN_ENV,
    RewardFnSettings,
    RLLoopSettings,
    RLSettings,
    WarmStartSettings,
    env_check,
    env_task,
    rl_workflow_for,
)
from recipes.data import shipped_data

ENVS = {"reward_fn": REWARD_FN_ENV}


@defaults(
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=16),
    rl=RLLoopSettings(group_size=8, groups_per_batch=8, num_batches=40),
    eval=HeldOutEval(every=10),
    warm_start=WarmStartSettings(steps=80, batch_size=16),
)
class Config(RLSettings):
    env: RewardFnSettings = Field(
        default_factory=lambda: RewardFnSettings(
            dataset=shipped_data("reward_fn/prompts.jsonl"),
            eval_dataset=shipped_data("reward_fn/eval.jsonl"),
            reward_fn=["recipes.rewards.examples:keyword_reward"],
        ),
        description="the prompts and the reward functions that score the replies",
    )


RECIPE = Recipe(
    name="reward_fn_rl",
    description="RL on a prompt data set scored by reward functions named module:function (no env to write)",
    config_cls=Config,
    workflow=rl_workflow_for(env_task(ENVS), env_check(ENVS)),
)
