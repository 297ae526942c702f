"""Stream-minibatch mode: the step's groups are rolled out concurrently and, as soon as a
minibatch's worth has finished (in finishing order), the same update stages the sync mode runs
(advantages, assembly, adjusters) prepare it and its forward_backward is submitted without waiting
for the rest. After `num_minibatches` minibatches one optim_step closes the substep;
`num_substeps` substeps make the step.

Advantages are per group, so a minibatch needs no other group's rollouts; a penalty's baseline
(e.g. the KL penalty's mean log-ratio), a batch-level advantage estimator's statistics and the
loss aggregation are the minibatch's (each minibatch weighted 1 / num_minibatches, see
`PolicyObjective`). With dynamic sampling a constant-reward group is replaced, as it finishes, by
a new one from the following batches, within `max_rounds` batches' worth per step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.errors import ConfigError
from kitchen.engine.ports import SamplingClient, TrainingClient
from kitchen.engine.stage import Stage
from kitchen.families.common.settings import OptimizerSettings, SamplingSettings
from kitchen.families.common.training import adam_params, guard_nonfinite
from kitchen.families.rl.algorithm_settings import AlgorithmSettings
from kitchen.families.rl.dynamic_sampling import extra_round_builders, fill_metrics, is_informative
from kitchen.families.rl.settings import EpisodeSettings, RLLoopSettings
from kitchen.families.rl.step import (
    Rollouts,
    note_dropped,
    prepare_update,
    rollout_options,
    rollout_params,
    submit_update,
)
from train_core.rl.policy_objective import PolicyUpdate, train_step_metrics
from train_core.rl.rollouts import DroppedGroup, SampledGroup, rollout_failure_metrics, sample_group
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder
from train_core.types import Datum, ForwardBackwardOutput, OptimStepOutput

GroupTask = asyncio.Task[SampledGroup | DroppedGroup]


@dataclass
class RolloutStream:
    """One step's rollouts in finishing order, and what has been submitted for them so far."""

    per_minibatch: int
    num_minibatches: int
    start_more: Callable[[], GroupTask | None] | None = None
    """Dynamic sampling: start one more group (None when the step's budget is spent)."""
    tasks: list[GroupTask] = field(default_factory=list)
    done: asyncio.Queue[GroupTask] = field(default_factory=asyncio.Queue)
    sampled: list[SampledGroup] = field(default_factory=list)
    dropped: list[DroppedGroup] = field(default_factory=list)
    constant: int = 0
    """Dynamic sampling: finished groups left out for constant rewards."""
    trained_D: list[Datum] = field(default_factory=list)
    substep: list[Awaitable[ForwardBackwardOutput]] = field(default_factory=list)
    forward_backward: list[Awaitable[ForwardBackwardOutput]] = field(default_factory=list)
    optim: list[Awaitable[OptimStepOutput]] = field(default_factory=list)
    submitted: int = 0
    taken: int = 0

    first_round: int = 0
    """Groups of the step's own batch (the rest are dynamic sampling's replacements)."""
    kept: int = 0

    def add(self, task: GroupTask) -> None:
        """Follow a started group; it is handed out when it finishes, in finishing order."""
        self.tasks.append(task)
        task.add_done_callback(self.done.put_nowait)

    async def next_finished(self) -> tuple[SampledGroup | DroppedGroup, bool] | None:
        """The next group to finish sampling and whether it is of the step's own batch; None when
        every started one was handed out."""
        if self.taken == len(self.tasks):
            return None
        self.taken += 1
        task = await self.done.get()
        return task.result(), self.tasks.index(task) < self.first_round

    def cancel_unused(self) -> None:
        """Stop replacement groups still sampling when the step's minibatches are full."""
        for task in self.tasks:
            task.cancel()


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
        rl_task: RLTask,
        sampling_client: SamplingClient,
        sampler_step: int,
        rl: RLLoopSettings,
        algorithm: AlgorithmSettings,
        sampling: SamplingSettings,
        episode: EpisodeSettings,
        run: RunConfig,
    ) -> StreamStarted:
        assert rl.stream_minibatch is not None  # this mode's workflow is built only with it
        num_minibatches = rl.stream_minibatch.num_minibatches
        count = rl.num_substeps * num_minibatches
        builders = env_group_builders
        if len(builders) % count:
            raise ConfigError(
                f"stream_minibatch: {len(builders)} groups in step {ctx.step} do not split into "
                f"num_substeps x num_minibatches = {count} minibatches"
            )
        params, options = rollout_params(sampling), rollout_options(episode)
        stream = RolloutStream(len(builders) // count, num_minibatches, first_round=len(builders))
        for i, b in enumerate(builders):
            key = ("train", run.seed, ctx.step, i)
            stream.add(asyncio.create_task(sample_group(b, sampling_client, sampler_step, params, key, options)))
        if algorithm.dynamic_sampling is not None:
            extra = (
                (round_index, i, builder)
                for round_index in range(1, algorithm.dynamic_sampling.max_rounds)
                for i, builder in enumerate(extra_round_builders(rl_task, ctx.step, round_index))
            )

            def start_more() -> GroupTask | None:
                round_index, i, builder = next(extra, (None, None, None))
                if builder is None:
                    return None
                key = ("dynamic_sampling", run.seed, ctx.step, round_index, i)
                return asyncio.create_task(sample_group(builder, sampling_client, sampler_step, params, key, options))

            stream.start_more = start_more
        return StreamStarted(stream, count)


class TakeMinibatch(Stage):
    """The next `groups_per_batch / minibatches` groups to finish sampling, as `sampled_groups`
    (less those dropped under `min_viable_group`; with dynamic sampling, constant-reward groups
    are left out and replaced while the step's budget lasts)."""

    async def run(self, ctx: Context, rollout_stream: RolloutStream) -> Rollouts:
        stream = rollout_stream
        minibatch: list[SampledGroup] = []
        dropped: list[DroppedGroup] = []
        while len(minibatch) + len(dropped) < stream.per_minibatch:
            finished = await stream.next_finished()
            if finished is None:
                break
            result, first_round = finished
            if isinstance(result, DroppedGroup):
                dropped.append(result)
                continue
            if first_round:  # rollout metrics: the step's own batch, as without dynamic sampling
                stream.sampled.append(result)
            if stream.start_more is None or is_informative(result):
                minibatch.append(result)
                stream.kept += 1
                continue
            stream.constant += 1
            task = stream.start_more()
            if task is not None:
                stream.add(task)
        note_dropped(ctx, dropped)
        stream.dropped += dropped
        return Rollouts(minibatch)


class SubmitMinibatch(Stage):
    """Submit the minibatch's forward_backward (none when it has no datums); after the substep's
    last minibatch, its optim_step (none when the substep had no datums: an Adam step with no
    gradient would still move the weights)."""

    calls = (
        TrainingClient.forward,
        TrainingClient.forward_backward,
        TrainingClient.forward_backward_custom,
        TrainingClient.optim_step,
    )

    async def run(
        self,
        ctx: Context,
        rl_data: list[Datum],
        training_client: TrainingClient,
        rollout_stream: RolloutStream,
        policy_update: PolicyUpdate,
        optimizer: OptimizerSettings,
    ) -> None:
        stream = rollout_stream
        if rl_data:
            data_D, metrics = await prepare_update(policy_update, training_client, rl_data)
            ctx.record(metrics)
            stream.substep.append(await submit_update(policy_update, training_client, data_D))
            stream.trained_D += data_D
        stream.submitted += 1
        if stream.submitted % stream.num_minibatches == 0 and stream.substep:
            stream.optim.append(await training_client.optim_step(adam_params(ctx, optimizer)))
            stream.forward_backward += stream.substep
            stream.substep = []


@dataclass(frozen=True)
class StreamFinished:
    sampled_groups: list[SampledGroup]
    trained_data: list[Datum]


class FinishStreamStep(Stage):
    """Await the step's submitted work and record its train metrics; the step's own groups become
    `sampled_groups` for the rollout metrics and transcripts (not dynamic sampling's
    replacements, which are cancelled if still sampling), and the datums trained `trained_data`.
    A step whose optimizer did not apply a NaN/inf update counts towards `max_bad_steps`
    (`guard_nonfinite`)."""

    async def run(
        self,
        ctx: Context,
        rollout_stream: RolloutStream,
        policy_update: PolicyUpdate,
        rl: RLLoopSettings,
        algorithm: AlgorithmSettings,
        run: RunConfig,
    ) -> StreamFinished:
        stream = rollout_stream
        stream.cancel_unused()
        fb_outputs = [await future for future in stream.forward_backward]
        optim_outputs = [await future for future in stream.optim]
        ctx.record(rollout_failure_metrics(stream.sampled, stream.dropped))
        if algorithm.dynamic_sampling is not None:
            sampled = stream.kept + stream.constant
            ctx.record(fill_metrics(sampled, stream.constant, stream.kept, rl.groups_per_batch))
        if stream.trained_D:
            ctx.record(train_step_metrics(stream.trained_D, fb_outputs, optim_outputs))
            ctx.record(policy_update.metrics(stream.trained_D, fb_outputs))
            guard_nonfinite(ctx, ctx.step, run.max_bad_steps, optim_outputs, fb_outputs)
        return StreamFinished(stream.sampled, stream.trained_D)
