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

from kitchen.context import Context
from kitchen.errors import DataError
from kitchen.rl.sampling import ROLLOUT_KEYS, note_dropped, rollout_options, rollout_params
from kitchen.stage import Stage
from train_core.rl.metrics import rollout_failure_metrics
from train_core.rl.rollouts import DroppedGroup, SampledGroup, sample_group
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


class CreateOffPolicyQueue(Stage):
    """The hand-off that the sampling workers and the trainer share in async mode."""

    writes = ("off_policy_queue",)
    config_keys = ("async_config", "groups_per_batch")

    async def run(self, ctx: Context) -> None:
        max_age = ctx.config.async_config.max_steps_off_policy
        ctx["off_policy_queue"] = OffPolicyQueue(ctx.config.groups_per_batch, max_age, ctx.step)


class RolloutWorkers(Stage):
    """Async mode's producer: a feeder queues the dataset's builders batch after batch (from the
    step the run starts at) and `async_config.num_workers` (default `groups_per_batch`) workers each roll out one group
    at a time with whatever sampler is newest, tagging the group with that sampler's step; a
    worker waits while a group started now would be too old by the time it is trained.
    Runs, concurrently with the trainer, until the queue is closed; a failing worker fails it."""

    reads = ("off_policy_queue", "rl_task", "sampling_client", "sampler_step")
    calls = ("SamplingClient.sample",)
    config_keys = (*ROLLOUT_KEYS, "async_config", "groups_per_batch")

    async def run(self, ctx: Context) -> None:
        queue: OffPolicyQueue = ctx["off_policy_queue"]
        dataset = ctx["rl_task"].train
        params, options = rollout_params(ctx), rollout_options(ctx)
        first_batch = ctx.step
        num_workers = ctx.config.async_config.num_workers or ctx.config.groups_per_batch

        async def feed() -> None:
            index = first_batch
            while True:
                for builder in dataset.get_batch(index % len(dataset)):
                    await queue.builders.put(builder)
                index += 1

        async def work(worker: int) -> None:
            for count in itertools.count():
                builder = await queue.next_builder()
                await queue.wait_to_start(lambda: ctx["sampler_step"])
                sampler, sampler_step = ctx["sampling_client"], ctx["sampler_step"]
                seed_key = ("async", ctx.config.seed, worker, count)
                await queue.put(await sample_group(builder, sampler, sampler_step, params, seed_key, options))

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

    reads = ("off_policy_queue",)
    writes = ("sampled_groups",)

    async def run(self, ctx: Context) -> None:
        queue: OffPolicyQueue = ctx["off_policy_queue"]
        taken, dropped = await queue.take_batch(ctx.step)
        ages = [steps_off_policy(ctx.step, group.sampler_step) for group in taken]
        ctx["sampled_groups"] = taken
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


class StopRolloutWorkers(Stage):
    """Close the queue when the trainer is done, so the sampling workers' branch ends too."""

    reads = ("off_policy_queue",)

    async def run(self, ctx: Context) -> None:
        ctx["off_policy_queue"].close()
