"""RLHF from pairwise preferences: for each prompt a group of policy samples, rewarded by a
tournament within the group (see `train_core.rl.tournament`), judged by any pairwise judge (a
rule, a learned preference model, an LLM) through an async callable.

The judge is bound after the task is built (a learned judge needs the run's backend), through a
`JudgeSlot` the recipe shares between its group builders.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from train_core.distillation import PromptOnlyEnv
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.tournament import PairScheme, tournament_pairs, tournament_rewards
from train_core.rl.types import Env, EnvGroupBuilder, Metrics, RLDataset, Trajectory

AsyncJudge = Callable[[Sequence[Message], Message, Message], Awaitable[float]]
"""(prompt, completion A, completion B) -> score in [-1, 1]: -1 prefers A, +1 prefers B, 0 ties."""


class JudgeSlot:
    """Holds the judge the envs call; bound once the run has opened it."""

    def __init__(self, judge: AsyncJudge | None = None, max_concurrent: int = 64) -> None:
        self.judge = judge
        self._limit = asyncio.Semaphore(max_concurrent) if max_concurrent > 0 else None
        self.max_concurrent = max_concurrent

    def bind(self, judge: AsyncJudge) -> None:
        self.judge = judge

    async def __call__(self, prompt: Sequence[Message], completion_A: Message, completion_B: Message) -> float:
        if self.judge is None:
            raise RuntimeError("no judge is bound to this pairwise-preference task")
        if self._limit is None:
            return await self.judge(prompt, completion_A, completion_B)
        async with self._limit:
            return await self.judge(prompt, completion_A, completion_B)


@dataclass(frozen=True)
class PairwisePreferenceGroupBuilder(EnvGroupBuilder):
    """`num_envs` replies to one prompt; rewards from a tournament among them (`scheme`: all pairs
    one way, or both ways to cancel position bias). All the group's judge calls run concurrently
    (a learned judge's backend batches them)."""

    prompt: tuple[Message, ...]
    renderer: Renderer
    num_envs: int
    judge: JudgeSlot
    scheme: PairScheme = "both_ways"
    dataset_name: str = "preference"

    async def make_envs(self) -> list[PromptOnlyEnv]:
        return [PromptOnlyEnv(self.prompt, self.renderer) for _ in range(self.num_envs)]

    def reply(self, trajectory: Trajectory) -> Message:
        message, _ = self.renderer.parse_response(trajectory.transitions[-1].ac.tokens)
        return message

    async def compute_group_rewards(
        self, trajectories_G: Sequence[Trajectory], envs_G: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        replies = [self.reply(t) for t in trajectories_G]
        pairs = tournament_pairs(len(replies), self.scheme)
        scores = await asyncio.gather(*(self.judge(self.prompt, replies[a], replies[b]) for a, b in pairs))
        result = tournament_rewards(len(replies), pairs, scores)
        group: Metrics = {
            "preference/win_rate_in_group": result.win_rate_in_group,
            "preference/ties": result.tie_fraction,
        }
        if result.position_bias is not None:
            group["preference/position_bias"] = result.position_bias
        return [(reward, {**group, "preference/win_score": reward}) for reward in result.rewards_G]

    def logging_tags(self) -> list[str]:
        return [self.dataset_name]


class PairwisePreferenceDataset(RLDataset):
    """Batches of `groups_per_batch` prompts in a seeded order reshuffled each pass."""

    def __init__(
        self,
        prompts: Sequence[Sequence[Message]],
        renderer: Renderer,
        judge: JudgeSlot,
        groups_per_batch: int,
        group_size: int,
        seed: int,
        scheme: PairScheme = "both_ways",
        name: str = "preference",
    ) -> None:
        if not prompts:
            raise ValueError("a pairwise-preference dataset needs prompts")
        self.prompts = [tuple(p) for p in prompts]
        self.renderer, self.judge, self.scheme, self.name = renderer, judge, scheme, name
        self.groups_per_batch, self.group_size, self.seed = groups_per_batch, group_size, seed

    def __len__(self) -> int:
        return max(1, len(self.prompts) // self.groups_per_batch)

    def builder(self, prompt: tuple[Message, ...]) -> PairwisePreferenceGroupBuilder:
        return PairwisePreferenceGroupBuilder(
            prompt, self.renderer, self.group_size, self.judge, self.scheme, self.name
        )

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        per_pass = len(self)
        order = list(range(len(self.prompts)))
        random.Random(f"{self.name}/{self.seed}/{index // per_pass}").shuffle(order)
        start = (index % per_pass) * self.groups_per_batch
        return [self.builder(self.prompts[order[(start + k) % len(order)]]) for k in range(self.groups_per_batch)]
