"""Async off-policy mode: sampling and training overlap, and no group older than
`max_steps_off_policy` optimizer steps is ever trained on (stale ones are resampled)."""

from __future__ import annotations

import asyncio
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


def test_take_batch_drops_stale_groups_and_requeues_their_builders() -> None:
    async def run() -> tuple[list[str], int, list[str]]:
        queue = OffPolicyQueue(groups_per_batch=2, max_steps_off_policy=1, first_step=5)
        for sampler_step, name in [(3, "too old"), (4, "one off"), (2, "older"), (5, "on policy")]:
            await queue.wait_to_start(lambda: 5)
            await queue.put(sampled(sampler_step, name))
        taken, dropped = await queue.take_batch(5)
        first, second = await queue.next_builder(), await queue.next_builder()
        return [g.builder.prompt for g in taken], dropped, [first.prompt, second.prompt]  # type: ignore[attr-defined]

    taken, dropped, requeued = asyncio.run(run())
    assert taken == ["one off", "on policy"] and dropped == 2
    assert requeued == ["too old", "older"]


@given(st.integers(0, 3), st.integers(1, 4), st.integers(0, 12))
def test_workers_wait_while_a_new_group_would_be_stale(max_off: int, per_batch: int, ahead: int) -> None:
    """With `ahead` groups queued for step 0 and weights at step 0, one more may start only if
    it would be trained within `max_off` steps: at step ahead // per_batch."""

    async def can_start() -> bool:
        queue = OffPolicyQueue(per_batch, max_off, first_step=0)
        for index in range(ahead):
            await queue.wait_to_start(lambda: 10**6)  # weights far ahead: never too old to start
            await queue.put(sampled(0, str(index)))
        try:
            await asyncio.wait_for(queue.wait_to_start(lambda: 0), timeout=0.01)
        except TimeoutError:
            return False
        return True

    assert asyncio.run(can_start()) == (ahead // per_batch <= max_off)
