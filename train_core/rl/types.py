"""The RL vocabulary: environments, what a rollout records, and how batches of envs are served.

An `Env` is single use: one episode, then it is discarded. Envs come in groups (built by an
`EnvGroupBuilder`) because advantages are centred within a group, GRPO-style.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from train_core.types import ModelInput, StopCondition, TokensWithLogprobs

Action = list[int]
Metrics = dict[str, float]

EpisodeStop = Literal["done", "max_turns", "max_tokens", "timeout", "overflow", "error"]
"""Why an episode ended: the env said so (`done`), a rollout limit cut it short (`max_turns`,
`max_tokens`, `timeout`, or `overflow`: an observation longer than the context), or it raised
(`error`, only kept under a failure policy that tolerates it)."""

EPISODE_STOPS: tuple[EpisodeStop, ...] = get_args(EpisodeStop)
LIMIT_STOPS: frozenset[EpisodeStop] = frozenset({"max_turns", "max_tokens", "timeout", "overflow"})
"""The stop reasons that a rollout limit imposes (what `termination_reward` applies to)."""


@dataclass(frozen=True)
class StepResult:
    """What an env answers to one action: the reward for it and what the policy sees next."""

    reward: float
    episode_done: bool
    next_observation: ModelInput
    next_stop_condition: StopCondition
    metrics: Metrics = field(default_factory=dict)
    parse_ok: bool = True
    """False when the action could not be parsed (the renderer's `ok`, or the env's own check);
    `parse_error_policy=mask` leaves such turns out of training."""


class Env(ABC):
    """One episode of interaction; single use, so it may keep whatever per-episode state it likes."""

    @abstractmethod
    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        """The first prompt and the stop condition for the first action."""

    @abstractmethod
    async def step(self, action: Action) -> StepResult:
        """Consume the sampled action tokens; say the reward and whether the episode is over."""


@dataclass(frozen=True)
class Transition:
    """One turn: the observation shown, the action sampled (with its logprobs) and its reward."""

    ob: ModelInput
    ac: TokensWithLogprobs
    reward: float
    episode_done: bool
    metrics: Metrics = field(default_factory=dict)
    parse_ok: bool = True


@dataclass(frozen=True)
class Trajectory:
    """A whole episode; `final_ob` is the observation after the last action (often empty)."""

    transitions: list[Transition]
    final_ob: ModelInput
    stop_reason: EpisodeStop = "done"


@dataclass(frozen=True)
class TrajectoryGroup:
    """The episodes of one env group, plus the group-level rewards computed once all finished."""

    trajectories_G: list[Trajectory]
    final_rewards_G: list[float]
    metrics_G: list[Metrics]
    num_failed: int = 0
    """Members left out because they raised (`min_viable_group`)."""

    def __post_init__(self) -> None:
        n = len(self.trajectories_G)
        if len(self.final_rewards_G) != n or len(self.metrics_G) != n:
            raise ValueError(
                f"TrajectoryGroup needs one final reward and one metrics dict per trajectory: "
                f"{n} trajectories, {len(self.final_rewards_G)} rewards, {len(self.metrics_G)} metrics"
            )

    def get_total_rewards(self) -> list[float]:
        """Per trajectory: the sum of its step rewards plus its final group reward."""
        return [
            sum(t.reward for t in traj.transitions) + final
            for traj, final in zip(self.trajectories_G, self.final_rewards_G, strict=True)
        ]


def has_reward_spread(rewards_G: Sequence[float]) -> bool:
    """True when the group's rewards are not all equal (a group of one never is)."""
    return len(set(rewards_G)) > 1


class EnvGroupBuilder(ABC):
    """Makes the envs of one group and, once they are all done, scores them jointly."""

    @abstractmethod
    async def make_envs(self) -> Sequence[Env]:
        """Fresh envs for one group (they are single use)."""

    async def compute_group_rewards(
        self, trajectories_G: Sequence[Trajectory], envs_G: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        """Rewards that need the whole group (e.g. pairwise preferences); none by default."""
        return [(0.0, {}) for _ in trajectories_G]

    def logging_tags(self) -> list[str]:
        """Names under which this group's metrics are also reported (`env/{tag}/...`)."""
        return []

    async def cleanup(self) -> None:  # noqa: B027 - an optional hook; most builders hold nothing
        """Release what the envs hold (sandboxes, connections); runs after every rollout, failed or not."""


class WrappedGroupBuilder(EnvGroupBuilder):
    """An `EnvGroupBuilder` that plays, scores and cleans up through `inner`'s, for builders that
    add data around a task's groups (a demonstration, a data-set completion) or change its envs.
    Subclasses are dataclasses that declare the `inner` field."""

    inner: EnvGroupBuilder

    async def make_envs(self) -> Sequence[Env]:
        return await self.inner.make_envs()

    async def compute_group_rewards(
        self, trajectories_G: Sequence[Trajectory], envs_G: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        return await self.inner.compute_group_rewards(trajectories_G, envs_G)

    def logging_tags(self) -> list[str]:
        return self.inner.logging_tags()

    async def cleanup(self) -> None:
        await self.inner.cleanup()


class RLDataset(ABC):
    """Batches of env-group builders, indexed by batch number."""

    @abstractmethod
    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]: ...

    @abstractmethod
    def __len__(self) -> int: ...
