"""A toy RL recipe for workflow tests, on the synthetic parity env (see `recipes.envs.parity`)."""

from __future__ import annotations

from pydantic import Field

from kitchen.config import defaults
from kitchen.recipe import Recipe
from kitchen.rl.settings import RLSettings
from kitchen.rl.workflow import rl_workflow_for
from recipes.envs.parity import ParityDataset, parity_task
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask


@defaults(group_size=4, groups_per_batch=4, num_batches=4, max_tokens=4, eval_every=2, save_every=2)
class ToyConfig(RLSettings):
    turns: int = Field(1, ge=1)
    slow_group_delay: float = 0.0
    group_bonus: float = Field(0.01, ge=0)
    constant_reward: bool = False


def build_task(config: ToyConfig, renderer: Renderer) -> RLTask:
    return parity_task(
        ParityDataset(
            renderer,
            config.num_batches,
            config.groups_per_batch,
            config.group_size,
            config.turns,
            -1.0 if config.constant_reward else config.group_bonus,
            config.seed,
            config.slow_group_delay,
        )
    )


TOY_RECIPE = Recipe("toy_rl", "parity rewards for workflow tests", ToyConfig, rl_workflow_for(build_task))
