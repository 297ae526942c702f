"""A toy RL recipe for workflow tests, on the synthetic parity env (see `recipes.envs.parity`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import Field

from kitchen import CheckpointSettings, HeldOutEval, Recipe, SamplingSettings, defaults
from kitchen.families.rl import RLLoopSettings, RLSettings, rl_workflow_for
from recipes.envs.parity import ParityDataset, parity_task
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, RLDataset, StepResult, WrappedGroupBuilder
from train_core.types import ModelInput, StopCondition


@defaults(
    rl=RLLoopSettings(group_size=4, groups_per_batch=4, num_batches=4),
    sampling=SamplingSettings(max_tokens=4),
    eval=HeldOutEval(every=2),
    checkpoint=CheckpointSettings(save_every=2),
)
class ToyConfig(RLSettings):
    turns: int = Field(1, ge=1)
    slow_group_delay: float = 0.0
    group_bonus: float = Field(0.01, ge=0)
    constant_reward: bool = False
    failing_members: int = Field(0, ge=0, description="the first N envs of a group raise on their first step")
    fail_attempts: int = Field(0, ge=0, description="...on the first N rollouts of each group; 0 = always")
    parse_errors: bool = Field(False, description="a reply whose first token id is odd 'fails to parse'")


class Flaky(Env):
    """A parity env that raises on its step (`fail`) or marks odd first tokens as parse errors."""

    def __init__(self, inner: Env, fail: bool, parse_errors: bool) -> None:
        self.inner, self.fail, self.parse_errors = inner, fail, parse_errors

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return await self.inner.initial_observation()

    async def step(self, action: Action) -> StepResult:
        if self.fail:
            raise RuntimeError("flaky env broke")
        result = await self.inner.step(action)
        if self.parse_errors:
            result = dataclasses.replace(result, parse_ok=bool(action) and action[0] % 2 == 0)
        return result


@dataclass
class FlakyGroup(WrappedGroupBuilder):
    inner: EnvGroupBuilder
    failing_members: int
    fail_attempts: int
    parse_errors: bool
    attempts: list[int] = field(default_factory=lambda: [0])

    async def make_envs(self) -> Sequence[Env]:
        self.attempts[0] += 1
        failing = self.failing_members if self.fail_attempts == 0 or self.attempts[0] <= self.fail_attempts else 0
        envs = await self.inner.make_envs()
        return [Flaky(env, index < failing, self.parse_errors) for index, env in enumerate(envs)]


@dataclass(frozen=True)
class FlakyDataset(RLDataset):
    inner: RLDataset
    config: ToyConfig

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        c = self.config
        return [FlakyGroup(b, c.failing_members, c.fail_attempts, c.parse_errors) for b in self.inner.get_batch(index)]

    def __len__(self) -> int:
        return len(self.inner)


def build_task(config: ToyConfig, renderer: Renderer) -> RLTask:
    task = _parity(config, renderer)
    if config.failing_members or config.parse_errors:
        return dataclasses.replace(task, train=FlakyDataset(task.train, config))
    return task


def _parity(config: ToyConfig, renderer: Renderer) -> RLTask:
    return parity_task(
        ParityDataset(
            renderer,
            config.rl.num_batches,
            config.rl.groups_per_batch,
            config.rl.group_size,
            config.turns,
            -1.0 if config.constant_reward else config.group_bonus,
            config.seed,
            config.slow_group_delay,
        )
    )


TOY_RECIPE = Recipe("toy_rl", "parity rewards for workflow tests", ToyConfig, rl_workflow_for(build_task))
