"""env_rl: RL on any registered environment (`kitchen.envs`): the `env` section names one and
holds its own settings, checked against its settings model before any work.

    kitchen run env_rl env=guess_number env.max_turns=5

The shipped environments are `arithmetic`, `gsm8k` and `guess_number` (and, with the `hubs` extra,
`verifiers` and `openenv`; with the `mcp` extra, `mcp`: any MCP server's tools); a package adds its
own by declaring an `EnvSpec` under the `kitchen.envs` entry-point group.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.rl import (
    ENVS,
    RLLoopSettings,
    RLSettings,
    WarmStartSettings,
    env_check,
    env_choice,
    env_task,
    rl_workflow_for,
)

REGISTERED = ENVS.load()


@defaults(
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=8),
    rl=RLLoopSettings(group_size=8, groups_per_batch=16, num_batches=60),
    eval=HeldOutEval(every=20),
    warm_start=WarmStartSettings(steps=200),
)
class Config(RLSettings):
    RENAMED_KEYS: ClassVar[dict[str, str]] = {"env_args": "env"}

    env: env_choice(REGISTERED) = Field(  # type: ignore[valid-type]  # the registered environments
        default_factory=lambda: REGISTERED["arithmetic"].settings(),
        description="a registered RL environment (entry-point group kitchen.envs) and its settings",
    )


RECIPE = Recipe(
    name="env_rl",
    description="RL on any registered environment (env: NAME, and its settings under env)",
    config_cls=Config,
    workflow=rl_workflow_for(env_task(REGISTERED), env_check(REGISTERED)),
)
