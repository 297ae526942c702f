"""Running episodes: one env to completion, or a whole group of envs concurrently, with the
group's requests for one prompt served by one sample call and seeds derived from where a group is
drawn (so reruns and resumed runs draw the same samples)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from train_core.rl.types import Env, EnvGroupBuilder, Trajectory, TrajectoryGroup, Transition
from train_core.types import ModelInput, SampleResult, SamplingParams, StopCondition, TokensWithLogprobs

TokenPolicy = Callable[[ModelInput, StopCondition], Awaitable[TokensWithLogprobs]]
"""Samples one action for an observation, stopping at the env's stop condition."""

_T = TypeVar("_T")


class Sampler(Protocol):
    """The part of a sampling client a policy needs (kitchen's SamplingClient satisfies it)."""

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult: ...


def sampling_policy(sampler: Sampler, params: SamplingParams) -> TokenPolicy:
    """A policy drawing one sample per call; the env's stop condition replaces `params.stop`."""

    async def policy(ob: ModelInput, stop: StopCondition) -> TokensWithLogprobs:
        result = await sampler.sample(ob, 1, dataclasses.replace(params, stop=stop))
        return result.sequences[0]

    return policy


async def do_single_rollout(policy: TokenPolicy, env: Env) -> Trajectory:
    """Alternate policy and env until the env says the episode is done."""
    transitions: list[Transition] = []
    ob, stop = await env.initial_observation()
    while True:
        ac = await policy(ob, stop)
        result = await env.step(ac.tokens)
        transitions.append(Transition(ob, ac, result.reward, result.episode_done, result.metrics))
        ob, stop = result.next_observation, result.next_stop_condition
        if result.episode_done:
            return Trajectory(transitions, final_ob=ob)


async def _gather_or_cancel(coros: Sequence[Coroutine[Any, Any, _T]]) -> list[_T]:
    """Run concurrently, results in order; on the first failure cancel and await the rest.

    Plain `gather` leaves the siblings of a failed task running, so cleanup could pull resources
    out from under them; here nothing is still running when the error propagates.
    """
    tasks = [asyncio.create_task(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def do_group_rollout(builder: EnvGroupBuilder, policy: TokenPolicy) -> TrajectoryGroup:
    """Roll out every env of a group at once, then add the group rewards; always clean up."""
    try:
        envs_G = list(await builder.make_envs())
        trajectories_G = await _gather_or_cancel([do_single_rollout(policy, env) for env in envs_G])
        rewards_and_metrics_G = await builder.compute_group_rewards(trajectories_G, envs_G)
        if len(rewards_and_metrics_G) != len(trajectories_G):
            raise ValueError(
                f"{type(builder).__name__}.compute_group_rewards returned {len(rewards_and_metrics_G)} "
                f"rewards for {len(trajectories_G)} trajectories"
            )
        return TrajectoryGroup(
            trajectories_G=trajectories_G,
            final_rewards_G=[reward for reward, _ in rewards_and_metrics_G],
            metrics_G=[metrics for _, metrics in rewards_and_metrics_G],
        )
    finally:
        await builder.cleanup()


# -- groups sampled together, seeded by where they are drawn ---------------------------------


def derive_seed(*parts: object) -> int:
    """A 63-bit seed that is a stable function of `parts` (their reprs), across processes."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def shared_sampling_policy(sampler: Sampler, params: SamplingParams, seed_key: Sequence[Hashable]) -> TokenPolicy:
    """A policy for one group. The first request for a prompt waits one loop turn for the others
    to join, then samples for all. Each call's seed derives from `seed_key`, the prompt and how
    many calls that prompt had before, so a rerun draws the same samples."""
    followers_by_prompt: dict[tuple[Hashable, ...], list[asyncio.Future[TokensWithLogprobs]]] = {}
    calls_by_prompt: Counter[tuple[Hashable, ...]] = Counter()

    async def policy(ob: ModelInput, stop: StopCondition) -> TokensWithLogprobs:
        key = (tuple(ob.to_ints()), tuple(stop))
        followers = followers_by_prompt.get(key)
        if followers is not None:
            future: asyncio.Future[TokensWithLogprobs] = asyncio.get_running_loop().create_future()
            followers.append(future)
            return await future
        followers = followers_by_prompt[key] = []
        try:
            await asyncio.sleep(0)  # the group's other envs reach this prompt in the same loop turn
            del followers_by_prompt[key]
            seed = derive_seed(*seed_key, key, calls_by_prompt[key])
            calls_by_prompt[key] += 1
            call_params = dataclasses.replace(params, stop=stop, seed=seed)
            result = await sampler.sample(ob, 1 + len(followers), call_params)
        except BaseException as exc:
            followers_by_prompt.pop(key, None)
            for future in followers:
                if future.done():
                    continue
                if isinstance(exc, Exception):
                    future.set_exception(exc)
                else:
                    future.cancel()
            raise
        for future, sequence in zip(followers, result.sequences[1:], strict=True):
            if not future.done():
                future.set_result(sequence)
        return result.sequences[0]

    return policy


@dataclass(frozen=True)
class SampledGroup:
    builder: EnvGroupBuilder
    trajectories: TrajectoryGroup
    sampler_step: int
    """Optimizer steps the sampling weights had taken: a group trained at step s is
    `s - sampler_step` steps off-policy."""


async def sample_group(
    builder: EnvGroupBuilder,
    sampler: Sampler,
    sampler_step: int,
    params: SamplingParams,
    seed_key: Sequence[Hashable],
) -> SampledGroup:
    """Roll out one group with `sampler`; seeds derive from `seed_key` (see `shared_sampling_policy`)."""
    policy = shared_sampling_policy(sampler, params, seed_key)
    return SampledGroup(builder, await do_group_rollout(builder, policy), sampler_step)
