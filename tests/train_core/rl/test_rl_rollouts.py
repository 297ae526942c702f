"""Rollouts with a toy multi-turn env and a deterministic policy: order, concurrency, cleanup."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from train_core.rl.rollouts import TokenPolicy, do_group_rollout, do_single_rollout, sampling_policy
from train_core.rl.types import Env, EnvGroupBuilder, Metrics, StepResult, Trajectory, TrajectoryGroup
from train_core.types import ModelInput, SampleResult, SamplingParams, StopCondition, TokensWithLogprobs

SEP = 99


class EchoEnv(Env):
    """A chat-like env: each observation is the previous one + the action + a separator token.

    Reward per turn is the number of action tokens; the episode lasts `turns` turns. The stop
    condition of turn t is [t], so tests can see it reach the policy.
    """

    def __init__(self, env_id: int, turns: int, delay_s: float = 0.0) -> None:
        self.env_id, self.turns, self.delay_s = env_id, turns, delay_s
        self.tokens = [100 + env_id]
        self.turn = 0

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return ModelInput.from_ints(self.tokens), [self.turn]

    async def step(self, action: list[int]) -> StepResult:
        await asyncio.sleep(self.delay_s)
        self.turn += 1
        self.tokens = [*self.tokens, *action, SEP]
        done = self.turn == self.turns
        return StepResult(
            reward=float(len(action)),
            episode_done=done,
            next_observation=ModelInput.empty() if done else ModelInput.from_ints(self.tokens),
            next_stop_condition=[self.turn],
            metrics={"turn": float(self.turn)},
        )


@dataclass
class PolicyLog:
    calls: list[tuple[list[int], StopCondition]] = field(default_factory=list)


def deterministic_policy(log: PolicyLog) -> TokenPolicy:
    """Answers with [len(ob), 7]: a pure function of the observation, with fixed logprobs."""

    async def policy(ob: ModelInput, stop: StopCondition) -> TokensWithLogprobs:
        log.calls.append((ob.to_ints(), stop))
        return TokensWithLogprobs([ob.length, 7], [-0.5, -0.25])

    return policy


def test_single_rollout_hand_worked() -> None:
    log = PolicyLog()
    traj = asyncio.run(do_single_rollout(deterministic_policy(log), EchoEnv(env_id=3, turns=2)))

    assert [t.ob.to_ints() for t in traj.transitions] == [[103], [103, 1, 7, SEP]]
    assert [t.ac.tokens for t in traj.transitions] == [[1, 7], [4, 7]]
    assert [t.reward for t in traj.transitions] == [2.0, 2.0]
    assert [t.episode_done for t in traj.transitions] == [False, True]
    assert [t.metrics for t in traj.transitions] == [{"turn": 1.0}, {"turn": 2.0}]
    assert traj.final_ob == ModelInput.empty()
    assert [stop for _, stop in log.calls] == [[0], [1]]


@dataclass
class EchoGroupBuilder(EnvGroupBuilder):
    """Envs with given turn counts and delays; group reward 10 * index; records cleanup."""

    turns_G: Sequence[int]
    delays_G: Sequence[float]
    events: list[str] = field(default_factory=list)

    async def make_envs(self) -> Sequence[Env]:
        return [EchoEnv(i, n, d) for i, (n, d) in enumerate(zip(self.turns_G, self.delays_G, strict=True))]

    async def compute_group_rewards(
        self, trajectories_G: Sequence[Trajectory], envs_G: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        self.events.append("group_rewards")
        return [(10.0 * i, {"idx": float(i)}) for i in range(len(trajectories_G))]

    async def cleanup(self) -> None:
        self.events.append("cleanup")


def test_group_rollout_keeps_env_order_when_envs_finish_out_of_order() -> None:
    # The first env is slowest, so completion order is the reverse of env order.
    builder = EchoGroupBuilder(turns_G=[3, 1, 2], delays_G=[0.03, 0.0, 0.01])
    group = asyncio.run(do_group_rollout(builder, deterministic_policy(PolicyLog())))

    assert [len(t.transitions) for t in group.trajectories_G] == [3, 1, 2]
    assert [t.transitions[0].ob.to_ints() for t in group.trajectories_G] == [[100], [101], [102]]
    assert group.final_rewards_G == [0.0, 10.0, 20.0]
    assert group.metrics_G == [{"idx": 0.0}, {"idx": 1.0}, {"idx": 2.0}]
    assert group.get_total_rewards() == [6.0, 12.0, 24.0]
    assert builder.events == ["group_rewards", "cleanup"]


def test_envs_built_ahead_serve_the_group_rollout() -> None:
    """Async mode's workers build a group's envs while they wait to be admitted: the rollout
    uses exactly those envs (the builder is not asked again) and still cleans up."""
    builder = EchoGroupBuilder(turns_G=[2, 1], delays_G=[0.0, 0.0])

    async def run() -> TrajectoryGroup:
        ahead = await builder.make_envs()
        builder.turns_G = [5, 5]  # envs built now would differ
        return await do_group_rollout(builder, deterministic_policy(PolicyLog()), None, asyncio.sleep(0, ahead))

    group = asyncio.run(run())
    assert [len(t.transitions) for t in group.trajectories_G] == [2, 1]
    assert builder.events == ["group_rewards", "cleanup"]


class RendezvousEnv(Env):
    """Each env waits in its first step until every env of the group is in its first step:
    this completes only if the group's envs run at the same time."""

    def __init__(self, arrived: list[int], all_here: asyncio.Event, group_size: int) -> None:
        self.arrived, self.all_here, self.group_size = arrived, all_here, group_size

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return ModelInput.from_ints([1]), [0]

    async def step(self, action: list[int]) -> StepResult:
        self.arrived.append(1)
        if len(self.arrived) == self.group_size:
            self.all_here.set()
        await self.all_here.wait()
        return StepResult(1.0, True, ModelInput.empty(), [0])


class RendezvousBuilder(EnvGroupBuilder):
    def __init__(self, group_size: int) -> None:
        self.group_size = group_size

    async def make_envs(self) -> Sequence[Env]:
        arrived: list[int] = []
        all_here = asyncio.Event()
        return [RendezvousEnv(arrived, all_here, self.group_size) for _ in range(self.group_size)]


def test_envs_of_a_group_roll_out_concurrently() -> None:
    async def run() -> list[float]:
        group = await asyncio.wait_for(
            do_group_rollout(RendezvousBuilder(4), deterministic_policy(PolicyLog())), timeout=5.0
        )
        return group.get_total_rewards()

    assert asyncio.run(run()) == [1.0, 1.0, 1.0, 1.0]


class FailingEnv(Env):
    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return ModelInput.from_ints([1]), [0]

    async def step(self, action: list[int]) -> StepResult:
        await asyncio.sleep(0.01)
        raise RuntimeError("env crashed")


class SlowEnv(Env):
    """Would take far longer than the test; records being cancelled."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return ModelInput.from_ints([1]), [0]

    async def step(self, action: list[int]) -> StepResult:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.events.append("slow env cancelled")
            raise
        return StepResult(0.0, True, ModelInput.empty(), [0])


@dataclass
class FaultyBuilder(EnvGroupBuilder):
    fail_in: str
    events: list[str] = field(default_factory=list)

    async def make_envs(self) -> Sequence[Env]:
        if self.fail_in == "make_envs":
            raise RuntimeError("no sandbox available")
        if self.fail_in == "env":
            return [SlowEnv(self.events), FailingEnv()]
        return [SlowEnv(self.events)] if self.fail_in == "never" else [EchoEnv(0, 1), EchoEnv(1, 1)]

    async def compute_group_rewards(
        self, trajectories_G: Sequence[Trajectory], envs_G: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        if self.fail_in == "group_rewards":
            raise RuntimeError("judge unavailable")
        return [(0.0, {})]  # one reward for two trajectories: a builder bug

    async def cleanup(self) -> None:
        self.events.append("cleanup")


@pytest.mark.parametrize(
    ("fail_in", "error"),
    [
        ("make_envs", "no sandbox available"),
        ("group_rewards", "judge unavailable"),
        ("reward_count", "returned 1 rewards for 2 trajectories"),
    ],
)
def test_cleanup_runs_when_the_group_fails(fail_in: str, error: str) -> None:
    builder = FaultyBuilder(fail_in)
    with pytest.raises((RuntimeError, ValueError), match=error):
        asyncio.run(do_group_rollout(builder, deterministic_policy(PolicyLog())))
    assert builder.events == ["cleanup"]


def test_failing_env_cancels_its_siblings_before_cleanup() -> None:
    builder = FaultyBuilder("env")

    async def run() -> None:
        await asyncio.wait_for(do_group_rollout(builder, deterministic_policy(PolicyLog())), timeout=5.0)

    with pytest.raises(RuntimeError, match="env crashed"):
        asyncio.run(run())
    assert builder.events == ["slow env cancelled", "cleanup"]


def test_cleanup_runs_when_the_rollout_is_cancelled() -> None:
    builder = FaultyBuilder("never")

    async def run() -> None:
        task = asyncio.create_task(do_group_rollout(builder, deterministic_policy(PolicyLog())))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert builder.events == ["slow env cancelled", "cleanup"]


@dataclass
class RecordingSampler:
    """A sampler test double: answers one fixed sequence and records each request."""

    requests: list[tuple[list[int], int, SamplingParams]] = field(default_factory=list)

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult:
        self.requests.append((prompt.to_ints(), num_samples, sampling_params))
        return SampleResult([TokensWithLogprobs([5, 6], [-0.1, -0.2], "stop")])


def test_sampling_policy_samples_once_with_the_envs_stop_condition() -> None:
    sampler = RecordingSampler()
    params = SamplingParams(max_tokens=16, temperature=0.7, stop=["ignored"], seed=3)
    policy = sampling_policy(sampler, params)

    async def sample_once() -> TokensWithLogprobs:
        return await policy(ModelInput.from_ints([1, 2]), [42])

    out = asyncio.run(sample_once())

    assert out == TokensWithLogprobs([5, 6], [-0.1, -0.2], "stop")
    assert sampler.requests == [([1, 2], 1, SamplingParams(max_tokens=16, seed=3, stop=[42], temperature=0.7))]
