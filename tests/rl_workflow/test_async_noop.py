"""Async off-policy mode: sampling and training overlap, and no group older than
`max_steps_off_policy` optimizer steps is ever trained on, by admission control: nothing is
thrown away for its age."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kitchen.rl.async_mode import OffPolicyQueue
from recipes.envs.parity import ParityGroup
from tests.rl_workflow.envs_common import renderer
from tests.rl_workflow.runs import noop_backend, run_toy
from train_core.rl.rollouts import SampledGroup
from train_core.rl.types import TrajectoryGroup

LATENCY = {"sample": 0.02, "forward_backward": 0.03}


def run_async(tmp_path: Path, max_off: int, *extra: str) -> list[dict[str, float]]:
    backend = noop_backend(tmp_path, LATENCY)
    args = [f"async_config.max_steps_off_policy={max_off}", "num_batches=6", *extra]
    _, rows = run_toy(tmp_path, *args, backend=backend)
    return rows


@pytest.mark.parametrize("max_off", [0, 1])
def test_no_group_older_than_max_steps_off_policy_is_trained(tmp_path: Path, max_off: int) -> None:
    rows = run_async(tmp_path, max_off)
    assert [row["step"] for row in rows] == list(range(6))
    ages = [row["async/steps_off_policy_max"] for row in rows]
    assert max(ages) <= max_off
    assert all(row["async/over_bound_groups"] == 0 for row in rows)
    assert all(row["env/all/total_episodes"] == 4 * 4 for row in rows)
    if max_off == 1:
        # With one step of slack the trainer uses groups sampled during the previous update.
        assert max(ages) == 1


def test_async_runs_multi_turn_with_kl_and_substeps(tmp_path: Path) -> None:
    rows = run_async(tmp_path, 1, "turns=2", "kl_penalty_coef=0.1", "num_substeps=2")
    assert all(row["env/all/turns_per_episode"] == 2 and "kl_policy_base" in row for row in rows)
    assert all(row["optim/substeps"] == 2 for row in rows)


def sampled(sampler_step: int, name: str) -> SampledGroup:
    builder = ParityGroup(name, renderer(), 1, 1, 0.0)
    return SampledGroup(builder, TrajectoryGroup([], [], []), sampler_step)


def test_take_batch_takes_oldest_weights_first_and_throws_nothing_away() -> None:
    """Finished groups are taken earliest deadline first; none is dropped, the rest wait."""

    async def run() -> tuple[list[str], list[str]]:
        queue = OffPolicyQueue(groups_per_batch=2, max_steps_off_policy=3, first_step=5)
        for sampler_step, name in [(5, "on policy"), (4, "one off"), (3, "two off")]:
            admitted = await asyncio.wait_for(queue.wait_to_start(functools.partial(int, sampler_step)), timeout=1)
            await queue.put(sampled(sampler_step, name), admitted)
        first = await queue.take_batch(5)
        second = await asyncio.wait_for(queue.take_batch(6, budget=1), timeout=1)
        return [g.builder.prompt for g in first.trained], [g.builder.prompt for g in second.trained]  # type: ignore[attr-defined]

    first, second = asyncio.run(run())
    assert first == ["two off", "one off"]
    assert second == ["on policy"]


def test_the_trainer_waits_for_an_unfinished_group_due_this_step() -> None:
    """A group in flight with weights 3 (bound 1) must be trained at step 4: the trainer leaves
    its place free and waits for it instead of filling the batch with younger groups."""

    async def run() -> list[int]:
        queue = OffPolicyQueue(groups_per_batch=2, max_steps_off_policy=1, first_step=4)
        due = await queue.wait_to_start(lambda: 3)
        young = await queue.wait_to_start(lambda: 4)
        await queue.put(sampled(young, "young"), young)
        await queue.put(sampled(4, "young 2"), await queue.wait_to_start(lambda: 4))
        taking = asyncio.create_task(asyncio.wait_for(queue.take_batch(4), timeout=5))
        await asyncio.sleep(0.01)
        assert not taking.done()  # one young group taken; the other place is owed to the due one
        await queue.put(sampled(due, "due"), due)
        return [g.sampler_step for g in (await taking).trained]

    assert sorted(asyncio.run(run())) == [3, 4]


@given(st.integers(0, 3), st.integers(1, 4), st.integers(0, 12))
def test_workers_wait_while_a_new_group_would_be_stale(max_off: int, per_batch: int, ahead: int) -> None:
    """With `ahead` groups queued for step 0 and weights at step 0, one more may start only if
    it would be trained within `max_off` steps: at step ahead // per_batch."""

    async def can_start() -> bool:
        queue = OffPolicyQueue(per_batch, max_off, first_step=0)
        for index in range(ahead):
            step = await queue.wait_to_start(lambda: 10**6)  # weights far ahead: never too old to start
            await queue.put(sampled(0, str(index)), step)
        try:
            await asyncio.wait_for(queue.wait_to_start(lambda: 0), timeout=0.01)
        except TimeoutError:
            return False
        return True

    assert asyncio.run(can_start()) == (ahead // per_batch <= max_off)
