"""In-flight weight updates for async mode: the trainer publishes each new sampler to a feed, and
sampling requests follow it instead of draining.

A `FollowingSampler` sends each request (each turn of an episode) to the newest published
sampler; where that sampler's backend can switch weights between decode steps
(`FollowsWeightUpdates`: noop, local), a generation already running moves to weights published
while it runs. Either way every token comes back tagged with the policy version that produced it
and with its logprob under those weights, so the behaviour logprobs the off-policy corrections
use (decoupled PPO, TIS, MIS) are per token as sampled. `token_staleness_metrics` summarises the
versions of what a step trains on.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import cast

from kitchen.engine.ports import FollowsWeightUpdates, SamplingClient, WeightFeed
from train_core.rl.rollouts import SampledGroup
from train_core.types import ModelInput, SampleResult, SamplingParams, TokensWithLogprobs


class PublishedWeights:
    """The feed async mode's trainer publishes its samplers to (a `WeightFeed`). The pair is
    replaced in one assignment, so a sampler's own thread always reads a consistent one."""

    def __init__(self, version: int, client: SamplingClient) -> None:
        self._latest = (version, client)

    def publish(self, version: int, client: SamplingClient) -> None:
        if version > self._latest[0]:
            self._latest = (version, client)

    def latest(self) -> tuple[int, SamplingClient]:
        return self._latest

    @property
    def version(self) -> int:
        return self._latest[0]


def tagged(result: SampleResult, version: int) -> SampleResult:
    """`result` with every token marked as produced by `version` (a sampler that cannot switch)."""
    return SampleResult(
        [dataclasses.replace(seq, maybe_versions=[version] * len(seq.tokens)) for seq in result.sequences]
    )


@functools.cache
def _follows(client_type: type) -> bool:
    """Whether a sampling client class can follow weight updates (a protocol `isinstance` check
    costs tens of microseconds: once per class, not once per sample call)."""
    return issubclass(client_type, FollowsWeightUpdates)


class FollowingSampler:
    """A `Sampler` that follows `feed`: the newest weights for every request and, where the
    backend allows, within a generation (see the module doc)."""

    def __init__(self, feed: WeightFeed) -> None:
        self.feed = feed

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult:
        version, client = self.feed.latest()
        if _follows(type(client)):
            following = cast(FollowsWeightUpdates, client)
            return await following.sample_following(prompt, num_samples, sampling_params, self.feed, version)
        return tagged(await client.sample(prompt, num_samples, sampling_params), version)


def token_versions(action: TokensWithLogprobs, sampler_step: int) -> list[int]:
    """The policy version of each token of `action` (untagged: the group's sampler's)."""
    return action.maybe_versions if action.maybe_versions is not None else [sampler_step] * len(action.tokens)


def token_staleness_metrics(step: int, groups: Sequence[SampledGroup]) -> dict[str, float]:
    """Staleness of the tokens trained at `step` (`step - version`): per sample (trajectory), the
    min, mean and max over its tokens, averaged over samples, the worst token of the step, and the
    fraction of samples whose tokens came from more than one version (spanning a weight update)."""
    per_sample: list[tuple[int, float, int]] = []
    spanning = 0
    for group in groups:
        for trajectory in group.trajectories.trajectories_G:
            ages = [
                step - version
                for transition in trajectory.transitions
                for version in token_versions(transition.ac, group.sampler_step)
            ]
            if not ages:
                continue
            per_sample.append((min(ages), sum(ages) / len(ages), max(ages)))
            spanning += min(ages) != max(ages)
    if not per_sample:
        return {}
    count = len(per_sample)
    return {
        "async/token_staleness_min": sum(s[0] for s in per_sample) / count,
        "async/token_staleness_mean": sum(s[1] for s in per_sample) / count,
        "async/token_staleness_max": sum(s[2] for s in per_sample) / count,
        "async/token_staleness_worst": float(max(s[2] for s in per_sample)),
        "async/samples_spanning_updates": spanning / count,
    }
