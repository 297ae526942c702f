"""Async (off-policy) mode: sampling workers and the trainer run concurrently, joined by a queue.

The trainer side runs the same update stages as sync mode on the groups it takes.

Workers start a group only when it can still be fresh when the trainer reaches it: a group drawn
now with weights `s` will be trained at step `next + ahead // groups_per_batch`, where `ahead`
counts the groups the trainer will take before it. Without this gate workers that sample faster
than the trainer trains run ever further ahead, and every other batch they draw is too old.
The trainer still checks each group's age when it takes it (the guarantee; the gate only avoids
waste), drops stale ones and requeues their builders, which are sampled again first.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kitchen.context import Context
from kitchen.errors import DataError
from kitchen.ports import SamplingClient
from kitchen.rl.settings import RLSettings
from kitchen.rl.step import Rollouts, note_dropped, rollout_options, rollout_params
from kitchen.stage import Live, Stage
from train_core.rl.metrics import rollout_failure_metrics
from train_core.rl.rollouts import DroppedGroup, SampledGroup, sample_group
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder

MAX_DROPS_IN_A_ROW = 4
"""Batches' worth of consecutive dropped groups after which async mode gives up (the trainer
would otherwise wait forever for a group)."""


def steps_off_policy(step: int, sampler_step: int) -> int:
    """How many optimizer steps older than the trained weights the sampling weights are."""
    return step - sampler_step


class OffPolicyQueue:
    def __init__(self, groups_per_batch: int, max_steps_off_policy: int, first_step: int) -> None:
        self.groups_per_batch = groups_per_batch
        self.max_steps_off_policy = max_steps_off_policy
        self.builders: asyncio.Queue[EnvGroupBuilder] = asyncio.Queue(maxsize=groups_per_batch)
        self.closed = asyncio.Event()
        self._groups: asyncio.Queue[SampledGroup] = asyncio.Queue()
        self._requeued: deque[EnvGroupBuilder] = deque()
        self._changed = asyncio.Condition()
        self._next_step = first_step  # the step whose batch the trainer takes next
        self._taken = 0  # groups already taken for that batch
        self._in_flight = 0
        self.dropped: list[DroppedGroup] = []  # dropped by the failure policy since the last batch
        self._drops_in_a_row = 0

    # -- workers -----------------------------------------------------------------------------

    async def next_builder(self) -> EnvGroupBuilder:
        """A requeued builder if there is one, else the next new one."""
        if self._requeued:
            return self._requeued.popleft()
        return await self.builders.get()

    def predicted_age(self, sampler_step: int) -> int:
        """Steps off-policy a group started now with weights `sampler_step` will be when trained."""
        ahead = self._taken + self._groups.qsize() + self._in_flight
        return steps_off_policy(self._next_step + ahead // self.groups_per_batch, sampler_step)

    async def wait_to_start(self, sampler_step: Callable[[], int]) -> None:
        """Wait until a group drawn with the current weights would be fresh when trained, then
        count it in flight until it is `put`."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.predicted_age(sampler_step()) <= self.max_steps_off_policy)
            self._in_flight += 1

    async def put(self, group: SampledGroup | DroppedGroup) -> None:
        """Hand over a sampled group; a dropped one (`min_viable_group`) is only counted, and its
        problem is not sampled again."""
        self._in_flight -= 1
        if isinstance(group, DroppedGroup):
            self.dropped.append(group)
            self._drops_in_a_row += 1
            if self._drops_in_a_row >= MAX_DROPS_IN_A_ROW * self.groups_per_batch:
                raise DataError(
                    f"rollout_failure: the last {self._drops_in_a_row} groups were all dropped "
                    f"(min_viable_group); the last error: {group.error}"
                )
        else:
            self._drops_in_a_row = 0
            self._groups.put_nowait(group)
        await self._notify()

    # -- trainer -----------------------------------------------------------------------------

    async def take_batch(self, step: int) -> tuple[list[SampledGroup], int]:
        """Groups for `step` in arrival order, each at most `max_steps_off_policy` steps old, and
        how many older ones were dropped (their builders are requeued)."""
        self._next_step, self._taken = step, 0
        await self._notify()  # the weights may have changed since the last batch: re-check
        taken: list[SampledGroup] = []
        dropped = 0
        while len(taken) < self.groups_per_batch:
            group = await self._groups.get()
            if steps_off_policy(step, group.sampler_step) <= self.max_steps_off_policy:
                taken.append(group)
                self._taken += 1
            else:
                self._requeued.append(group.builder)
                dropped += 1
            await self._notify()
        self._next_step, self._taken = step + 1, 0
        await self._notify()
        return taken, dropped

    def close(self) -> None:
        self.closed.set()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


@dataclass(frozen=True)
class Queue:
    off_policy_queue: OffPolicyQueue


class CreateOffPolicyQueue(Stage):
    """The hand-off that the sampling workers and the trainer share in async mode."""

    async def run(self, ctx: Context, config: RLSettings) -> Queue:
        assert config.async_config is not None  # this mode's workflow is built only with it
        return Queue(OffPolicyQueue(config.groups_per_batch, config.async_config.max_steps_off_policy, ctx.step))


class RolloutWorkers(Stage):
    """Async mode's producer: a feeder queues the dataset's builders batch after batch (from the
    step the run starts at) and `async_config.num_workers` (default `groups_per_batch`) workers
    each roll out one group at a time with whatever sampler is newest (a `Live` read), tagging
    the group with that sampler's step; a worker waits while a group started now would be too old
    by the time it is trained. Runs, concurrently with the trainer, until the queue is closed; a
    failing worker fails it."""

    calls = (SamplingClient.sample,)

    async def run(
        self,
        ctx: Context,
        off_policy_queue: OffPolicyQueue,
        rl_task: RLTask,
        sampling_client: Live[SamplingClient],
        sampler_step: Live[int],
        config: RLSettings,
    ) -> None:
        queue = off_policy_queue
        dataset = rl_task.train
        params, options = rollout_params(config), rollout_options(config)
        first_batch = ctx.step
        assert config.async_config is not None
        num_workers = config.async_config.num_workers or config.groups_per_batch

        async def feed() -> None:
            index = first_batch
            while True:
                for builder in dataset.get_batch(index % len(dataset)):
                    await queue.builders.put(builder)
                index += 1

        async def work(worker: int) -> None:
            for count in itertools.count():
                builder = await queue.next_builder()
                await queue.wait_to_start(sampler_step.get)
                sampler, step = sampling_client.get(), sampler_step.get()
                seed_key = ("async", config.seed, worker, count)
                await queue.put(await sample_group(builder, sampler, step, params, seed_key, options))

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


class TakeFreshGroups(Stage):
    """Async mode's trainer side: the step's `groups_per_batch` groups in arrival
    order, none more than `max_steps_off_policy` steps old (older ones are dropped and their
    problems requeued to be sampled again). Logs the ages of what it trains on."""

    async def run(self, ctx: Context, off_policy_queue: OffPolicyQueue) -> Rollouts:
        queue = off_policy_queue
        taken, dropped = await queue.take_batch(ctx.step)
        ages = [steps_off_policy(ctx.step, group.sampler_step) for group in taken]
        failed, queue.dropped = queue.dropped, []
        note_dropped(ctx, failed)
        ctx.record(rollout_failure_metrics(taken, failed))
        ctx.record(
            {
                "async/stale_groups_dropped": dropped,
                "async/steps_off_policy_mean": sum(ages) / len(ages),
                "async/steps_off_policy_max": max(ages),
            }
        )
        return Rollouts(taken)


class StopRolloutWorkers(Stage):
    """Close the queue when the trainer is done, so the sampling workers' branch ends too."""

    async def run(self, off_policy_queue: OffPolicyQueue) -> None:
        off_policy_queue.close()
