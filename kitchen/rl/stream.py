"""Stream-minibatch mode: the step's groups are rolled out concurrently and, as soon as a
minibatch's worth has finished (in finishing order), the same update stages the sync mode runs
(advantages, assembly, adjusters) prepare it and its forward_backward is submitted without waiting
for the rest. After `num_minibatches` minibatches one optim_step closes the substep;
`num_substeps` substeps make the step.

Advantages are per group, so a minibatch needs no other group's rollouts; a penalty's baseline
(e.g. the KL penalty's mean log-ratio) is the minibatch's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field

from kitchen.context import Context
from kitchen.errors import ConfigError
from kitchen.ports import SamplingClient, TrainingClient
from kitchen.rl.settings import RLSettings
from kitchen.rl.step import Rollouts, note_dropped, rollout_options, rollout_params
from kitchen.stage import Stage
from kitchen.stages.training import adam_params, guard_nonfinite
from train_core.rl.data_processing import remove_mask
from train_core.rl.metrics import rollout_failure_metrics, train_step_metrics
from train_core.rl.rollouts import DroppedGroup, SampledGroup, sample_group
from train_core.rl.types import EnvGroupBuilder
from train_core.types import Datum, ForwardBackwardOutput, OptimStepOutput


@dataclass
class RolloutStream:
    """One step's rollouts in finishing order, and what has been submitted for them so far."""

    tasks: list[asyncio.Task[SampledGroup | DroppedGroup]]
    finished: Iterator[Awaitable[SampledGroup | DroppedGroup]]
    per_minibatch: int
    num_minibatches: int
    sampled: list[SampledGroup] = field(default_factory=list)
    dropped: list[DroppedGroup] = field(default_factory=list)
    trained_D: list[Datum] = field(default_factory=list)
    substep: list[Awaitable[ForwardBackwardOutput]] = field(default_factory=list)
    forward_backward: list[Awaitable[ForwardBackwardOutput]] = field(default_factory=list)
    optim: list[Awaitable[OptimStepOutput]] = field(default_factory=list)
    submitted: int = 0


@dataclass(frozen=True)
class StreamStarted:
    rollout_stream: RolloutStream
    stream_minibatches: int


class StartRollouts(Stage):
    """Start rolling out every env group of the step concurrently (seeds as in sync mode) and
    size the minibatch loop: `num_substeps x num_minibatches` minibatches."""

    calls = (SamplingClient.sample,)

    async def run(
        self,
        ctx: Context,
        env_group_builders: list[EnvGroupBuilder],
        sampling_client: SamplingClient,
        sampler_step: int,
        config: RLSettings,
    ) -> StreamStarted:
        assert config.stream_minibatch is not None  # this mode's workflow is built only with it
        num_minibatches = config.stream_minibatch.num_minibatches
        count = config.num_substeps * num_minibatches
        builders = env_group_builders
        if len(builders) % count:
            raise ConfigError(
                f"stream_minibatch: {len(builders)} groups in step {ctx.step} do not split into "
                f"num_substeps x num_minibatches = {count} minibatches"
            )
        params, options = rollout_params(config), rollout_options(config)
        tasks = [
            asyncio.create_task(
                sample_group(b, sampling_client, sampler_step, params, ("train", config.seed, ctx.step, i), options)
            )
            for i, b in enumerate(builders)
        ]
        stream = RolloutStream(tasks, asyncio.as_completed(tasks), len(builders) // count, num_minibatches)
        return StreamStarted(stream, count)


class TakeMinibatch(Stage):
    """The next `groups_per_batch / minibatches` groups to finish sampling, as `sampled_groups`
    (less those dropped under `min_viable_group`)."""

    async def run(self, ctx: Context, rollout_stream: RolloutStream) -> Rollouts:
        stream = rollout_stream
        results = [await next(stream.finished) for _ in range(stream.per_minibatch)]
        minibatch = [r for r in results if isinstance(r, SampledGroup)]
        dropped = [r for r in results if isinstance(r, DroppedGroup)]
        note_dropped(ctx, dropped)
        stream.sampled += minibatch
        stream.dropped += dropped
        return Rollouts(minibatch)


class SubmitMinibatch(Stage):
    """Submit the minibatch's forward_backward (none when it has no datums); after the substep's
    last minibatch, its optim_step (none when the substep had no datums: an Adam step with no
    gradient would still move the weights)."""

    calls = (TrainingClient.forward_backward, TrainingClient.optim_step)

    async def run(
        self,
        ctx: Context,
        rl_data: list[Datum],
        training_client: TrainingClient,
        rollout_stream: RolloutStream,
        config: RLSettings,
    ) -> None:
        stream = rollout_stream
        if rl_data:
            future = await training_client.forward_backward(
                [remove_mask(d, config.loss_fn) for d in rl_data], config.loss_fn, config.loss_fn_config
            )
            stream.substep.append(future)
            stream.trained_D += rl_data
        stream.submitted += 1
        if stream.submitted % stream.num_minibatches == 0 and stream.substep:
            stream.optim.append(await training_client.optim_step(adam_params(ctx, config)))
            stream.forward_backward += stream.substep
            stream.substep = []


@dataclass(frozen=True)
class StreamFinished:
    sampled_groups: list[SampledGroup]
    trained_data: list[Datum]


class FinishStreamStep(Stage):
    """Await the step's submitted work and record its train metrics; all the step's groups become
    `sampled_groups` for the rollout metrics and transcripts, and the datums trained
    `trained_data`. A step whose optimizer did not apply a NaN/inf update counts towards
    `max_bad_steps` (`guard_nonfinite`)."""

    async def run(self, ctx: Context, rollout_stream: RolloutStream, config: RLSettings) -> StreamFinished:
        stream = rollout_stream
        fb_outputs = [await future for future in stream.forward_backward]
        optim_outputs = [await future for future in stream.optim]
        ctx.record(rollout_failure_metrics(stream.sampled, stream.dropped))
        if stream.trained_D:
            ctx.record(train_step_metrics(stream.trained_D, fb_outputs, optim_outputs))
            guard_nonfinite(ctx, ctx.step, config.max_bad_steps, optim_outputs, fb_outputs)
        return StreamFinished(stream.sampled, stream.trained_D)
