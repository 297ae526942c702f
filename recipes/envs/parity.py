"""A synthetic env for testing and benchmarking workflows, not for learning anything useful.

`ParityEnv` rewards an even first sampled token id, whatever sampler (noop included) wrote it,
and a group adds `group_bonus * i` to its i-th member, so no group is constant and every step
trains: call patterns are deterministic. A negative `group_bonus` instead makes every reward 0
(nothing to train on). With `turns > 1` each next observation is the previous one plus the
action plus " Again.", always an extension, so an episode trains as one datum.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass

from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, Metrics, RLDataset, StepResult, Trajectory
from train_core.types import ModelInput, StopCondition


class ParityEnv(Env):
    def __init__(self, ob: ModelInput, again: list[int], renderer: Renderer, turns: int, constant: bool) -> None:
        self.renderer = renderer
        self.turns_left = turns
        self.constant = constant
        self.ob = ob
        self.again = again

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return self.ob, self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        self.turns_left -= 1
        done = self.turns_left == 0
        reward = float(bool(action) and action[0] % 2 == 0 and not self.constant)
        self.ob = ModelInput.from_ints([*self.ob.to_ints(), *action, *self.again])
        next_ob = ModelInput.empty() if done else self.ob
        return StepResult(reward, done, next_ob, self.renderer.get_stop_sequences(), {"even": reward})


@dataclass(frozen=True)
class ParityGroup(EnvGroupBuilder):
    prompt: str
    renderer: Renderer
    group_size: int
    turns: int
    group_bonus: float
    delay: float = 0.0
    """Seconds before the envs exist: lets a test make some groups finish later than others."""

    async def make_envs(self) -> list[ParityEnv]:
        await asyncio.sleep(self.delay)
        constant = self.group_bonus < 0
        ob = self.renderer.build_generation_prompt([Message(role="user", content=self.prompt)])
        again = self.renderer.tokenizer.encode(" Again.", add_special_tokens=False)
        return [ParityEnv(ob, again, self.renderer, self.turns, constant) for _ in range(self.group_size)]

    async def compute_group_rewards(
        self, trajectories_G: Sequence[Trajectory], envs_G: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        bonus = max(self.group_bonus, 0.0)
        return [(bonus * index, {}) for index in range(len(trajectories_G))]

    def logging_tags(self) -> list[str]:
        return ["parity"]


@dataclass(frozen=True)
class ParityDataset(RLDataset):
    renderer: Renderer
    num_batches: int
    groups_per_batch: int
    group_size: int
    turns: int
    group_bonus: float
    seed: int
    slow_group_delay: float = 0.0
    """Delay of each batch's last group."""

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"parity/{self.seed}/{index}")
        last = self.groups_per_batch - 1
        return [
            ParityGroup(
                f"Say something about {rng.randint(0, 99)}.",
                self.renderer,
                self.group_size,
                self.turns,
                self.group_bonus,
                delay=self.slow_group_delay if k == last else 0.0,
            )
            for k in range(self.groups_per_batch)
        ]

    def __len__(self) -> int:
        return self.num_batches


@dataclass(frozen=True)
class ParityDemonstrations:
    """Prompts of the dataset's kind answered with "Even.": something for a warm start to fit."""

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        return [
            [
                Message(role="user", content=f"Say something about {rng.randint(0, 99)}."),
                Message(role="assistant", content="Even."),
            ]
            for _ in range(count)
        ]


def parity_task(dataset: ParityDataset) -> RLTask:
    """The dataset, one held-out group of the same kind, and demonstrations."""
    held_out = ParityGroup("Evaluate.", dataset.renderer, dataset.group_size, dataset.turns, dataset.group_bonus)
    return RLTask(train=dataset, eval_builders=[held_out], demonstrations=ParityDemonstrations())
