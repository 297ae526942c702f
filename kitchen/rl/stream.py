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
from kitchen.rl.sampling import ROLLOUT_KEYS, note_dropped, rollout_options, rollout_params
from kitchen.rl.update import TRAIN_KEYS
from kitchen.stage import Stage
from kitchen.stages.training import adam_params, guard_nonfinite
from train_core.rl.data_processing import remove_mask
from train_core.rl.metrics import rollout_failure_metrics, train_step_metrics
from train_core.rl.rollouts import DroppedGroup, SampledGroup, sample_group
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


class StartRollouts(Stage):
    """Start rolling out every env group of the step concurrently (seeds as in sync mode) and
    size the minibatch loop: `num_substeps x num_minibatches` minibatches."""

    reads = ("env_group_builders", "sampling_client", "sampler_step")
    writes = ("rollout_stream", "stream_minibatches")
    calls = ("SamplingClient.sample",)
    config_keys = (*ROLLOUT_KEYS, "stream_minibatch", "num_substeps")

    async def run(self, ctx: Context) -> None:
        builders = ctx["env_group_builders"]
        num_minibatches = ctx.config.stream_minibatch.num_minibatches
        count = ctx.config.num_substeps * num_minibatches
        if len(builders) % count:
            raise ConfigError(
                f"stream_minibatch: {len(builders)} groups in step {ctx.step} do not split into "
                f"num_substeps x num_minibatches = {count} minibatches"
            )
        sampler, sampler_step, params = ctx["sampling_client"], ctx["sampler_step"], rollout_params(ctx)
        options = rollout_options(ctx)
        tasks = [
            asyncio.create_task(
                sample_group(b, sampler, sampler_step, params, ("train", ctx.config.seed, ctx.step, i), options)
            )
            for i, b in enumerate(builders)
        ]
        ctx["rollout_stream"] = RolloutStream(
            tasks, asyncio.as_completed(tasks), len(builders) // count, num_minibatches
        )
        ctx["stream_minibatches"] = count


class TakeMinibatch(Stage):
    """The next `groups_per_batch / minibatches` groups to finish sampling, as `sampled_groups`
    (less those dropped under `min_viable_group`)."""

    reads = ("rollout_stream",)
    writes = ("sampled_groups",)

    async def run(self, ctx: Context) -> None:
        stream: RolloutStream = ctx["rollout_stream"]
        results = [await next(stream.finished) for _ in range(stream.per_minibatch)]
        minibatch = [r for r in results if isinstance(r, SampledGroup)]
        dropped = [r for r in results if isinstance(r, DroppedGroup)]
        note_dropped(ctx, dropped)
        stream.sampled += minibatch
        stream.dropped += dropped
        ctx["sampled_groups"] = minibatch


class SubmitMinibatch(Stage):
    """Submit the minibatch's forward_backward (none when it has no datums); after the substep's
    last minibatch, its optim_step (none when the substep had no datums: an Adam step with no
    gradient would still move the weights)."""

    reads = ("rl_data", "training_client", "rollout_stream")
    calls = ("TrainingClient.forward_backward", "TrainingClient.optim_step")
    config_keys = TRAIN_KEYS

    async def run(self, ctx: Context) -> None:
        stream: RolloutStream = ctx["rollout_stream"]
        client, data_D = ctx["training_client"], ctx["rl_data"]
        if data_D:
            config = ctx.config
            future = await client.forward_backward(
                [remove_mask(d, config.loss_fn) for d in data_D], config.loss_fn, config.loss_fn_config
            )
            stream.substep.append(future)
            stream.trained_D += data_D
        stream.submitted += 1
        if stream.submitted % stream.num_minibatches == 0 and stream.substep:
            stream.optim.append(await client.optim_step(adam_params(ctx)))
            stream.forward_backward += stream.substep
            stream.substep = []


class FinishStreamStep(Stage):
    """Await the step's submitted work and record its train metrics; all the step's groups become
    `sampled_groups` for the rollout metrics and transcripts, and the datums trained
    `trained_data`. A step whose optimizer did not apply a NaN/inf update counts towards
    `max_bad_steps` (`guard_nonfinite`)."""

    reads = ("rollout_stream",)
    writes = ("sampled_groups", "trained_data")
    config_keys = ("max_bad_steps",)

    async def run(self, ctx: Context) -> None:
        stream: RolloutStream = ctx["rollout_stream"]
        fb_outputs = [await future for future in stream.forward_backward]
        optim_outputs = [await future for future in stream.optim]
        ctx["sampled_groups"] = stream.sampled
        ctx["trained_data"] = stream.trained_D
        ctx.record(rollout_failure_metrics(stream.sampled, stream.dropped))
        if stream.trained_D:
            ctx.record(train_step_metrics(stream.trained_D, fb_outputs, optim_outputs))
            guard_nonfinite(ctx, ctx.step, optim_outputs, fb_outputs)
