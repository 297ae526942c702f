"""Async off-policy mode: sampling and training overlap, and no group older than
`max_steps_off_policy` optimizer steps is ever trained on, by admission control: nothing is
thrown away for its age."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kitchen.families.rl.async_mode import OffPolicyQueue
from kitchen.families.rl.weight_feed import FollowingSampler
from kitchen.testing.contract.data import ScriptedFeed
from recipes.envs.parity import ParityGroup
from tests.rl_workflow.envs_common import renderer
from tests.rl_workflow.runs import noop_backend, run_toy
from train_core.losses import behaviour_weights
from train_core.rl.data_processing import assemble_training_data, compute_advantages
from train_core.rl.rollouts import SampledGroup, sample_group
from train_core.rl.types import TrajectoryGroup
from train_core.types import AdamParams, SamplingParams

LATENCY = {"sample": 0.02, "forward_backward": 0.03}


def run_async(tmp_path: Path, max_off: int, *extra: str) -> list[dict[str, float]]:
    backend = noop_backend(tmp_path, LATENCY)
    args = [f"rl.async_config.max_steps_off_policy={max_off}", "rl.num_batches=6", *extra]
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
    rows = run_async(tmp_path, 1, "turns=2", "algorithm.kl_penalty_coef=0.1", "rl.num_substeps=2")
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


def test_new_weights_admit_every_waiting_worker_in_one_loop_turn() -> None:
    """Workers waiting for fresher weights all start as soon as they are published (the trainer
    then hands the loop over for their requests: `hand_over`), and no more than the staleness
    bound lets start."""

    async def run() -> tuple[int, list[int]]:
        queue = OffPolicyQueue(groups_per_batch=4, max_steps_off_policy=0, first_step=1)
        weights = [0]
        order: list[int] = []

        async def worker(index: int) -> None:
            await queue.wait_to_start(lambda: weights[0])
            order.append(index)

        workers = [asyncio.create_task(worker(index)) for index in range(6)]
        await asyncio.sleep(0.01)
        assert not order  # weights 0 are one step too old for step 1's batch
        weights[0] = 1
        await queue.notify()
        await asyncio.sleep(0)  # one turn
        started = len(order)
        await asyncio.sleep(0.01)
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        return started, order

    started, order = asyncio.run(run())
    assert started == 4 and order == [0, 1, 2, 3]  # the batch's 4 places; the other 2 wait


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


def test_generations_span_weight_updates_and_tokens_carry_their_versions(tmp_path: Path) -> None:
    """In-flight weight updates: sampling (0.1 s a call) outlasts an update (0.03 s), so weights
    are published while generations run; those go on under the new weights, their tokens tagged
    with two versions, and the staleness of the tokens trained is logged per step."""
    backend = noop_backend(tmp_path, {"sample": 0.1, "forward_backward": 0.03})
    args = [
        "rl.async_config.max_steps_off_policy=1",
        "rl.num_batches=6",
        "sampling.max_tokens=8",
        "rl.transcript_groups=4",
    ]
    run_dir, rows = run_toy(tmp_path, *args, backend=backend)
    versions = [
        turn["policy_versions"]
        for path in sorted((run_dir.path / "rollouts").glob("step_*.jsonl"))
        for line in path.read_text().splitlines()
        for turn in json.loads(line)["turns"]
    ]
    assert versions and all(v == sorted(v) and v[-1] - v[0] <= 1 for v in versions)
    assert any(len(v) == 2 for v in versions)
    assert any(row["async/samples_spanning_updates"] > 0 for row in rows)
    for row in rows:
        assert row["async/token_staleness_min"] <= row["async/token_staleness_mean"] <= row["async/token_staleness_max"]
        assert row["async/token_staleness_worst"] <= 1  # admission bounds every token, not only the group


def test_without_following_each_generation_has_one_version(tmp_path: Path) -> None:
    backend = noop_backend(tmp_path, {"sample": 0.1, "forward_backward": 0.03})
    args = ["rl.async_config.max_steps_off_policy=1", "rl.async_config.follow_weight_updates=false", "rl.num_batches=4"]
    _, rows = run_toy(tmp_path, *args, "sampling.max_tokens=8", backend=backend)
    assert all(row["async/samples_spanning_updates"] == 0 for row in rows)
    token_means = [row["async/token_staleness_mean"] for row in rows]
    assert token_means == pytest.approx([row["async/steps_off_policy_mean"] for row in rows])


def test_corrections_weigh_each_token_by_the_version_that_sampled_it(tmp_path: Path) -> None:
    """A group whose generations switch weights part-way: its datums carry each token's logprob
    as sampled (old weights, then new), so decoupled PPO's behaviour weight exp(prox - behaviour)
    against the new (proximal) weights is exactly 1 for the tokens the new weights produced and
    the true old/new ratio for the others. TIS and MIS read the same `logprobs` input."""
    backend = noop_backend(tmp_path)

    async def run() -> tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor]:
        client = await backend.create_training_client("tiny")
        old = await client.save_weights_and_get_sampling_client()
        await (await client.optim_step(AdamParams()))
        new = await client.save_weights_and_get_sampling_client()
        feed = ScriptedFeed((0, old), (1, new), switch_after=3)
        builder = ParityGroup("Say something.", renderer(), 4, 1, 0.5)
        group = await sample_group(builder, FollowingSampler(feed), 0, SamplingParams(max_tokens=12), ("t",))
        assert isinstance(group, SampledGroup)
        trajectories = group.trajectories
        data_D, _ = assemble_training_data([trajectories], compute_advantages([trajectories], "grpo", {}))
        proximal = await (await client.forward(data_D, "importance_sampling"))
        actions = [t.ac for traj in trajectories.trajectories_G for t in traj.transitions]
        versions = [v for action in actions for v in action.maybe_versions or []]
        masks = [d.loss_fn_inputs["mask"].to_torch() > 0 for d in data_D]
        behaviour = torch.cat([d.loss_fn_inputs["logprobs"].to_torch()[m] for d, m in zip(data_D, masks, strict=True)])
        prox = torch.cat([o["logprobs"].to_torch()[m] for o, m in zip(proximal.loss_fn_outputs, masks, strict=True)])
        return versions, behaviour, prox, torch.tensor([lp for action in actions for lp in action.logprobs])

    versions, behaviour_T, proximal_T, sampled_T = asyncio.run(run())
    assert len(versions) == len(behaviour_T) and {0, 1} <= set(versions)
    assert torch.equal(behaviour_T, sampled_T)
    weights_T = behaviour_weights(behaviour_T, proximal_T)
    new_T = torch.tensor(versions) == 1
    assert torch.allclose(weights_T[new_T], torch.ones(int(new_T.sum())))
    assert not torch.allclose(weights_T[~new_T], torch.ones(int((~new_T).sum())), atol=1e-3)
