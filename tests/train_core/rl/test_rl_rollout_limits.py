"""Episode limits and stop reasons, the termination reward, the rollout failure policy, and the
shared sampling call surviving a member's timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.train_core.rl.rl_test_factories import transition
from train_core.rl.rollouts import (
    DroppedGroup,
    RolloutFailure,
    RolloutLimits,
    RolloutOptions,
    SampledGroup,
    apply_termination_reward,
    do_group_rollout,
    do_single_rollout,
    sample_group,
)
from train_core.rl.types import LIMIT_STOPS, Env, EnvGroupBuilder, StepResult, Trajectory, TrajectoryGroup
from train_core.types import ModelInput, SampleResult, SamplingParams, StopCondition, TokensWithLogprobs


class Endless(Env):
    """Never says done; each step can be slow; the observation can be long."""

    def __init__(self, ob_len: int = 3, step_delay: float = 0.0, fail: bool = False) -> None:
        self.ob_len, self.step_delay, self.fail = ob_len, step_delay, fail

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return ModelInput.from_ints(list(range(self.ob_len))), []

    async def step(self, action: list[int]) -> StepResult:
        if self.fail:
            raise RuntimeError("env broke")
        await asyncio.sleep(self.step_delay)
        return StepResult(1.0, False, ModelInput.from_ints([1, 2]), [], parse_ok=bool(action) and action[0] != 7)


async def two_tokens(ob: ModelInput, stop: StopCondition) -> TokensWithLogprobs:
    return TokensWithLogprobs([5, 6], [-0.1, -0.2])


def run(coro):
    return asyncio.run(coro)


def test_max_turns_stops_an_endless_episode() -> None:
    traj = run(do_single_rollout(two_tokens, Endless(), RolloutLimits(max_turns=3)))
    assert traj.stop_reason == "max_turns" and len(traj.transitions) == 3


def test_max_tokens_counts_sampled_tokens_over_turns() -> None:
    traj = run(do_single_rollout(two_tokens, Endless(), RolloutLimits(max_turns=10, max_tokens=5)))
    assert traj.stop_reason == "max_tokens" and len(traj.transitions) == 3  # 2 + 2 + 2 >= 5


def test_an_initial_observation_longer_than_the_context_overflows_unsampled() -> None:
    traj = run(do_single_rollout(two_tokens, Endless(ob_len=10), RolloutLimits(max_context_tokens=9, max_turns=2)))
    assert traj.stop_reason == "overflow" and traj.transitions == []


def test_the_wall_clock_budget_stops_a_slow_episode() -> None:
    traj = run(do_single_rollout(two_tokens, Endless(step_delay=0.05), RolloutLimits(timeout_s=0.12)))
    assert traj.stop_reason == "timeout" and 1 <= len(traj.transitions) <= 3


def test_an_env_that_finishes_is_done_and_parse_ok_is_copied() -> None:
    class Once(Endless):
        async def step(self, action: list[int]) -> StepResult:
            return StepResult(1.0, True, ModelInput.empty(), [], parse_ok=False)

    traj = run(do_single_rollout(two_tokens, Once(), RolloutLimits(max_turns=1)))
    assert traj.stop_reason == "done" and traj.transitions[0].parse_ok is False


def _group(stops: Sequence[str], step_rewards: Sequence[float], finals: Sequence[float]) -> TrajectoryGroup:
    trajs = [
        Trajectory([transition([1], [2], reward=r)], ModelInput.empty(), stop_reason=s)  # type: ignore[arg-type]
        for s, r in zip(stops, step_rewards, strict=True)
    ]
    return TrajectoryGroup(trajs, list(finals), [{} for _ in stops])


STOPS = st.sampled_from(["done", "max_turns", "max_tokens", "timeout", "overflow", "error"])
REWARD = st.floats(-10, 10, allow_nan=False)


@given(st.lists(st.tuples(STOPS, REWARD, REWARD), min_size=1, max_size=6), st.one_of(REWARD, st.just("zero")))
def test_termination_reward_changes_only_limit_stopped_totals(rows: list[tuple[str, float, float]], policy) -> None:
    group = _group([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    before, after = group.get_total_rewards(), apply_termination_reward(group, policy).get_total_rewards()
    for (stop, _, _), b, a in zip(rows, before, after, strict=True):
        if stop not in LIMIT_STOPS:
            assert a == b
        elif policy == "zero":  # min(total, 0), as the reference does
            assert a == (0.0 if b > 0 else b)
        else:
            assert a == pytest.approx(b + policy)
    assert apply_termination_reward(group, None) is group


@dataclass
class Builder(EnvGroupBuilder):
    envs: list[list[Env]]
    """The envs of each successive attempt."""
    made: int = 0
    cleaned: int = 0
    tags: list[str] = field(default_factory=lambda: ["t"])

    async def make_envs(self) -> Sequence[Env]:
        self.made += 1
        return self.envs[min(self.made - 1, len(self.envs) - 1)]

    async def cleanup(self) -> None:
        self.cleaned += 1


class Once(Endless):
    async def step(self, action: list[int]) -> StepResult:
        if self.fail:
            raise RuntimeError("env broke")
        return StepResult(1.0, True, ModelInput.empty(), [])


class FakeSampler:
    def __init__(self, delay: float = 0.0) -> None:
        self.delay, self.calls = delay, 0

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult:
        self.calls += 1
        await asyncio.sleep(self.delay)
        return SampleResult([TokensWithLogprobs([4], [-0.3]) for _ in range(num_samples)])


PARAMS = SamplingParams(max_tokens=2)


def test_fail_fast_raises() -> None:
    builder = Builder([[Once(), Once(fail=True)]])
    with pytest.raises(RuntimeError, match="env broke"):
        run(sample_group(builder, FakeSampler(), 0, PARAMS, ("k",)))
    assert builder.cleaned == 1


def test_retry_rolls_the_group_out_again_then_succeeds() -> None:
    builder = Builder([[Once(), Once(fail=True)], [Once(), Once()]])
    options = RolloutOptions(failure=RolloutFailure("retry", retries=2))
    group = run(sample_group(builder, FakeSampler(), 0, PARAMS, ("k",), options))
    assert isinstance(group, SampledGroup) and group.retries == 1 and builder.made == builder.cleaned == 2


def test_retry_gives_up_after_retries() -> None:
    builder = Builder([[Once(fail=True)]])
    options = RolloutOptions(failure=RolloutFailure("retry", retries=2))
    with pytest.raises(RuntimeError, match="env broke"):
        run(sample_group(builder, FakeSampler(), 0, PARAMS, ("k",), options))
    assert builder.made == 3


def test_min_viable_group_keeps_the_finished_members() -> None:
    builder = Builder([[Once(), Once(fail=True), Once()]])
    options = RolloutOptions(failure=RolloutFailure("min_viable_group", min_group_size=2))
    group = run(sample_group(builder, FakeSampler(), 0, PARAMS, ("k",), options))
    assert isinstance(group, SampledGroup)
    assert len(group.trajectories.trajectories_G) == 2 and group.trajectories.num_failed == 1


def test_min_viable_group_drops_a_group_with_too_few_members() -> None:
    builder = Builder([[Once(), Once(fail=True), Once(fail=True)]])
    options = RolloutOptions(failure=RolloutFailure("min_viable_group", min_group_size=2))
    dropped = run(sample_group(builder, FakeSampler(), 0, PARAMS, ("k",), options))
    assert isinstance(dropped, DroppedGroup) and "1 of 3 episodes finished" in dropped.error


def test_a_member_timing_out_on_a_shared_sample_leaves_the_others_their_samples() -> None:
    """The first member to ask leads the shared call; its own budget running out must not cancel
    the call the others wait on."""

    class SlowFirst(Env):
        def __init__(self, budget_first: bool) -> None:
            self.first = budget_first

        async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
            return ModelInput.from_ints([1, 2]), []

        async def step(self, action: list[int]) -> StepResult:
            return StepResult(1.0, True, ModelInput.empty(), [])

    sampler = FakeSampler(delay=0.1)
    builder = Builder([[SlowFirst(True), SlowFirst(False), SlowFirst(False)]])

    async def go() -> TrajectoryGroup:
        # one shared policy; only the leader's episode has a short budget
        from train_core.rl.rollouts import shared_sampling_policy

        policy = shared_sampling_policy(sampler, PARAMS, ("k",))
        envs = list(await builder.make_envs())
        trajs = await asyncio.gather(
            do_single_rollout(policy, envs[0], RolloutLimits(timeout_s=0.02)),
            do_single_rollout(policy, envs[1]),
            do_single_rollout(policy, envs[2]),
        )
        return TrajectoryGroup(list(trajs), [0.0] * 3, [{}] * 3)

    group = run(go())
    assert [t.stop_reason for t in group.trajectories_G] == ["timeout", "done", "done"]
    assert sampler.calls == 1


def test_group_rollout_applies_limits_and_termination_reward() -> None:
    builder = Builder([[Endless(), Endless()]])
    options = RolloutOptions(limits=RolloutLimits(max_turns=2), termination_reward="zero")
    group = run(do_group_rollout(builder, two_tokens, options))
    assert [t.stop_reason for t in group.trajectories_G] == ["max_turns", "max_turns"]
    assert group.get_total_rewards() == [0.0, 0.0]
