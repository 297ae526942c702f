"""Async (off-policy) mode: sampling workers and the trainer run concurrently, joined by a queue.

The trainer side runs the same update stages as sync mode on the groups it takes.

Admission control instead of discarding: a worker starts a group only when the trainer can consume
it within `max_steps_off_policy` steps of the weights it samples with. Each started group holds a
place in the trainer's consumption order, so the batch it will be trained in is known when it
starts (`next_step + ahead // groups_per_batch`, `ahead` counting the groups taken for the current
batch, those finished and those in flight); it starts only if that batch is at most
`max_steps_off_policy` steps past its weights. The trainer takes groups oldest weights first
(earliest deadline first), and waits for an unfinished group only when that group's deadline is
this step. Weights only grow over time, so places follow deadlines and no group can miss its
deadline: nothing sampled is thrown away for its age. (Were one ever older, e.g. after a resume
with a smaller bound, it is trained and counted in `async/over_bound_groups`.)

In-flight weight updates (`kitchen.families.rl.weight_feed`, `follow_weight_updates`, on by default): the
trainer publishes each new sampler (`PublishSampler`) and wakes waiting workers; every sampling
request of a group goes to the newest weights, and on backends that can, a generation switches
between decode steps, each token tagged with its policy version. A group's `sampler_step` is the
version it was admitted with, the oldest any of its tokens can have, so the bound holds for every
token. Staleness is logged per step (`async/steps_off_policy_mean|max` per group,
`async/token_staleness_*` per token), with how long the trainer waited for groups
(`async/wait_s`) and the groups in flight when it began.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.errors import DataError
from kitchen.engine.ports import SamplingClient
from kitchen.engine.stage import Stage
from kitchen.families.common.settings import SamplingSettings
from kitchen.families.rl.algorithm_settings import AlgorithmSettings
from kitchen.families.rl.dynamic_sampling import fill_metrics, is_informative
from kitchen.families.rl.settings import EpisodeSettings, RLLoopSettings
from kitchen.families.rl.step import note_dropped, rollout_options, rollout_params
from kitchen.families.rl.weight_feed import FollowingSampler, PublishedWeights, token_staleness_metrics
from train_core.rl.rollouts import DroppedGroup, SampledGroup, rollout_failure_metrics, sample_group
from train_core.rl.task import RLTask
from train_core.rl.types import Env, EnvGroupBuilder

HANDOVER_TURNS = 8
"""Event-loop turns the trainer yields after it admitted workers (publishing weights, taking
groups): enough for an admitted worker to get from its wake-up to its first sampling request
(admission, rollout tasks, the shared policy)."""


async def hand_over() -> None:
    """Let the workers just admitted send their sampling requests before the trainer's own CPU work
    holds the event loop: their sampling latency then runs alongside it. (A worker admitted only
    when the trainer took its last group would otherwise start after the trainer's CPU work, end
    that much after the next publication, and keep the next batch waiting: step after step.)"""
    for _ in range(HANDOVER_TURNS):
        await asyncio.sleep(0)


MAX_DROPS_IN_A_ROW = 4
"""Batches' worth of consecutive dropped groups after which async mode gives up (the trainer
would otherwise wait forever for a group)."""


def steps_off_policy(step: int, sampler_step: int) -> int:
    """How many optimizer steps older than the trained weights the sampling weights are."""
    return step - sampler_step


@dataclass(frozen=True)
class TakenBatch:
    """What the trainer took for one step."""

    groups: list[SampledGroup]
    """Every group taken, in the order taken (oldest weights first)."""
    trained: list[SampledGroup]
    """Those trained: all of them, or with dynamic sampling the informative ones."""
    wait_s: float
    in_flight_at_start: int


class OffPolicyQueue:
    def __init__(self, groups_per_batch: int, max_steps_off_policy: int, first_step: int) -> None:
        self.groups_per_batch = groups_per_batch
        self.max_steps_off_policy = max_steps_off_policy
        self.builders: asyncio.Queue[EnvGroupBuilder] = asyncio.Queue(maxsize=groups_per_batch)
        self.closed = asyncio.Event()
        self._finished: list[SampledGroup] = []
        self._in_flight: dict[int, int] = {}  # sampler_step -> groups being sampled with it
        self._changed = asyncio.Condition()
        self._next_step = first_step  # the step whose batch the trainer takes next
        self._taken = 0  # groups already taken for that batch
        self.dropped: list[DroppedGroup] = []  # dropped by the failure policy since the last batch
        self._drops_in_a_row = 0

    # -- workers -----------------------------------------------------------------------------

    async def next_builder(self) -> EnvGroupBuilder:
        return await self.builders.get()

    @property
    def in_flight(self) -> int:
        return sum(self._in_flight.values())

    def predicted_age(self, sampler_step: int) -> int:
        """Steps off-policy a group started now with weights `sampler_step` will be when trained."""
        ahead = self._taken + len(self._finished) + self.in_flight
        return steps_off_policy(self._next_step + ahead // self.groups_per_batch, sampler_step)

    async def wait_to_start(self, sampler_step: Callable[[], int]) -> int:
        """Wait until a group drawn with the current weights can be trained in time (admission),
        then count it in flight until it is `put`; the weights' step it was admitted with."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.predicted_age(sampler_step()) <= self.max_steps_off_policy)
            step = sampler_step()
            self._in_flight[step] = self._in_flight.get(step, 0) + 1
            return step

    async def put(self, group: SampledGroup | DroppedGroup, sampler_step: int) -> None:
        """Hand over a group sampled with weights `sampler_step`; a dropped one
        (`min_viable_group`) is only counted, and its problem is not sampled again."""
        self._in_flight[sampler_step] -= 1
        if isinstance(group, DroppedGroup):
            self.dropped.append(group)
            self._drops_in_a_row += 1
            if self._drops_in_a_row >= MAX_DROPS_IN_A_ROW * self.groups_per_batch:
                raise DataError(
                    f"episode.failure: the last {self._drops_in_a_row} groups were all dropped "
                    f"(below episode.failure.min_group_size); the last error: {group.error}"
                )
        else:
            self._drops_in_a_row = 0
            self._finished.append(group)
        await self._notify()

    # -- trainer -----------------------------------------------------------------------------

    def _due_in_flight(self, step: int) -> int:
        """Groups still being sampled that must be trained at `step` at the latest."""
        return sum(n for s, n in self._in_flight.items() if s + self.max_steps_off_policy <= step)

    def _can_take(self, step: int) -> bool:
        """A finished group may be taken now unless the batch's remaining places are all owed to
        unfinished groups due this step."""
        if not self._finished:
            return False
        oldest = min(g.sampler_step for g in self._finished)
        due_now = oldest + self.max_steps_off_policy <= step
        return due_now or self.groups_per_batch - self._taken > self._due_in_flight(step)

    async def take_batch(
        self, step: int, keep: Callable[[SampledGroup], bool] | None = None, budget: int | None = None
    ) -> TakenBatch:
        """Groups for `step`, oldest weights first, until `groups_per_batch` are kept (`keep`,
        default all; dynamic sampling keeps informative ones) or `budget` groups were taken."""
        started = time.perf_counter()
        in_flight = self.in_flight
        self._next_step, self._taken = step, 0
        await self._notify()  # the weights may have changed since the last batch: re-check
        taken: list[SampledGroup] = []
        trained: list[SampledGroup] = []
        while len(trained) < self.groups_per_batch and (budget is None or len(taken) < budget):
            async with self._changed:
                await self._changed.wait_for(lambda: self._can_take(step))
                group = min(self._finished, key=lambda g: g.sampler_step)
                self._finished.remove(group)
            taken.append(group)
            if keep is None or keep(group):
                trained.append(group)
                self._taken += 1
            await self._notify()
        self._next_step, self._taken = step + 1, 0
        await self._notify()
        return TakenBatch(taken, trained, time.perf_counter() - started, in_flight)

    def close(self) -> None:
        self.closed.set()

    async def notify(self) -> None:
        """Wake waiting workers (new weights were published: their admission may have changed)."""
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


@dataclass(frozen=True)
class Queue:
    off_policy_queue: OffPolicyQueue
    weight_feed: PublishedWeights


class CreateOffPolicyQueue(Stage):
    """The hand-offs that the sampling workers and the trainer share in async mode: groups one
    way, published samplers (starting with the current one) the other."""

    async def run(self, ctx: Context, sampling_client: SamplingClient, sampler_step: int, rl: RLLoopSettings) -> Queue:
        assert rl.async_config is not None  # this mode's workflow is built only with it
        queue = OffPolicyQueue(rl.groups_per_batch, rl.async_config.max_steps_off_policy, ctx.step)
        return Queue(queue, PublishedWeights(sampler_step, sampling_client))


class PublishSampler(Stage):
    """Async mode, after `RefreshSampler`: publish the new sampler to the workers (requests and,
    where the backend can, running generations switch to it) and wake those waiting to start."""

    async def run(
        self,
        off_policy_queue: OffPolicyQueue,
        weight_feed: PublishedWeights,
        sampling_client: SamplingClient,
        sampler_step: int,
    ) -> None:
        weight_feed.publish(sampler_step, sampling_client)
        await off_policy_queue.notify()
        await hand_over()


class RolloutWorkers(Stage):
    """Async mode's producer: a feeder queues the dataset's builders batch after batch (from the
    step the run starts at) and `rl.async_config.num_workers` (default `rl.groups_per_batch`) workers
    each roll out one group at a time with the newest published sampler, tagging the group with
    its version; with `follow_weight_updates` the group's requests follow later publications
    (`FollowingSampler`). A worker waits while a group started now would be too old by the time it
    is trained. Runs, concurrently with the trainer, until the queue is closed; a failing worker
    fails it."""

    calls = (SamplingClient.sample,)

    async def run(
        self,
        ctx: Context,
        off_policy_queue: OffPolicyQueue,
        rl_task: RLTask,
        weight_feed: PublishedWeights,
        rl: RLLoopSettings,
        sampling: SamplingSettings,
        episode: EpisodeSettings,
        run: RunConfig,
    ) -> None:
        queue = off_policy_queue
        dataset = rl_task.train
        params, options = rollout_params(sampling), rollout_options(episode)
        first_batch = ctx.step
        assert rl.async_config is not None
        num_workers = rl.async_config.num_workers or rl.groups_per_batch
        follow = rl.async_config.follow_weight_updates
        following = FollowingSampler(weight_feed)

        async def feed() -> None:
            index = first_batch
            while True:
                for builder in dataset.get_batch(index % len(dataset)):
                    await queue.builders.put(builder)
                index += 1

        async def admitted(builder: EnvGroupBuilder, envs: asyncio.Future[Sequence[Env]]) -> int:
            """Wait for admission; a worker stopped meanwhile cancels the envs or cleans them up."""
            try:
                return await queue.wait_to_start(lambda: weight_feed.version)
            except BaseException:
                if not envs.cancel():
                    with contextlib.suppress(Exception):
                        await builder.cleanup()
                raise

        async def work(worker: int) -> None:
            for count in itertools.count():
                builder = await queue.next_builder()
                # the envs (prompts rendered, tools set up) are built while the worker waits to be
                # admitted, so that its sampling requests go out as soon as new weights allow
                envs = asyncio.ensure_future(builder.make_envs())
                step = await admitted(builder, envs)
                sampler = following if follow else weight_feed.latest()[1]
                seed_key = ("async", run.seed, worker, count)
                group = await sample_group(builder, sampler, step, params, seed_key, options, envs)
                await queue.put(group, step)

        tasks = [
            asyncio.create_task(feed()),
            *(asyncio.create_task(work(i)) for i in range(num_workers)),
        ]
        closed = asyncio.create_task(queue.closed.wait())
        try:
            done, _ = await asyncio.wait([*tasks, closed], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not closed:
                    task.result()  # a worker or the feeder failed: raise its error
        finally:
            for task in [*tasks, closed]:
                task.cancel()
            await asyncio.gather(*tasks, closed, return_exceptions=True)


@dataclass(frozen=True)
class AsyncBatch:
    sampled_groups: list[SampledGroup]
    filled_groups: list[SampledGroup]


class TakeFreshGroups(Stage):
    """Async mode's trainer side: the step's `groups_per_batch` groups, oldest weights first (see
    the module doc: admission control keeps each within `max_steps_off_policy`). Every group
    taken is `sampled_groups` (logged); those trained `filled_groups`: with dynamic sampling, the
    trainer leaves constant-reward groups out and takes more, up to `max_rounds` batches' worth.
    Logs the staleness of what it trains on, its wait for groups and the groups in flight."""

    async def run(
        self, ctx: Context, off_policy_queue: OffPolicyQueue, rl: RLLoopSettings, algorithm: AlgorithmSettings
    ) -> AsyncBatch:
        queue = off_policy_queue
        dynamic = algorithm.dynamic_sampling
        if dynamic is None:
            batch = await queue.take_batch(ctx.step)
        else:
            batch = await queue.take_batch(ctx.step, is_informative, dynamic.max_rounds * rl.groups_per_batch)
            dropped = len(batch.groups) - len(batch.trained)
            ctx.record(fill_metrics(len(batch.groups), dropped, len(batch.trained), rl.groups_per_batch))
        await hand_over()
        failed, queue.dropped = queue.dropped, []
        note_dropped(ctx, failed)
        ctx.record(rollout_failure_metrics(batch.groups, failed))
        ages = [steps_off_policy(ctx.step, group.sampler_step) for group in batch.trained] or [0]
        ctx.record(
            {
                "async/steps_off_policy_mean": sum(ages) / len(ages),
                "async/steps_off_policy_max": max(ages),
                "async/over_bound_groups": sum(age > queue.max_steps_off_policy for age in ages),
                "async/wait_s": batch.wait_s,
                "async/in_flight": batch.in_flight_at_start,
                **token_staleness_metrics(ctx.step, batch.trained),
            }
        )
        return AsyncBatch(batch.groups, batch.trained)


class StopRolloutWorkers(Stage):
    """Close the queue when the trainer is done, so the sampling workers' branch ends too."""

    async def run(self, off_policy_queue: OffPolicyQueue) -> None:
        off_policy_queue.close()
