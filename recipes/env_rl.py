"""env_rl: RL on any registered environment (`kitchen.envs`): `env: NAME`, and that
environment's own settings under `env_args:`, checked against its settings model before any work.

    kitchen run env_rl env=guess_number env_args.max_turns=5

The shipped environments are `arithmetic`, `gsm8k` and `guess_number`; a package adds its own by
declaring an `EnvSpec` under the `kitchen.envs` entry-point group.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from kitchen.engine.config.loading import defaults
from kitchen.engine.recipe import Recipe
from kitchen.families.rl.envs import ENVS, EnvSpec
from kitchen.families.rl.settings import RLSettings
from kitchen.families.rl.workflow import rl_workflow_for
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
    env: str = Field("arithmetic", description="a registered RL environment (entry-point group kitchen.envs)")
    env_args: dict[str, Any] = Field(default_factory=dict, description="the environment's own settings")

    @field_validator("env")
    @classmethod
    def _registered(cls, name: str) -> str:
        ENVS.get(name)  # a ConfigError with "did you mean" for an unknown name
        return name

    @model_validator(mode="after")
    def _env_args_fit(self) -> Config:
        spec(self).parse(self.env_args)
        return self


def spec(config: Config) -> EnvSpec[Any]:
    return ENVS.get(config.env)


def build_task(config: Config, renderer: Renderer) -> RLTask:
    env = spec(config)
    return env.build_task(env.parse(config.env_args), config, renderer)


def check_env_data(config: Config, roles: frozenset[str]) -> None:
    """The environment's data files, before anything starts."""
    env = spec(config)
    if env.check is not None:
        env.check(env.parse(config.env_args))


RECIPE = Recipe(
    name="env_rl",
    description="RL on any registered environment (env: NAME, env_args: its settings)",
    config_cls=Config,
    workflow=rl_workflow_for(build_task, check_env_data),
)
