"""DAPO's data side: dynamic sampling's group filter and batch fill, overlong reward shaping and
overlong filtering; hand-worked, properties, and cross-checks against verl's DAPO recipe."""

from __future__ import annotations

from dataclasses import replace

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from rl_test_factories import single_turn_group, trajectory, transition

from train_core.errors import InvalidInputError
from train_core.rl.data_processing import assemble_training_data
from train_core.rl.dynamic_sampling import BatchFill, trajectory_batch_fill
from train_core.rl.overlong import (
    default_buffer_tokens,
    filter_overlong,
    is_truncated,
    overlong_penalty,
    shape_overlong_rewards,
)
from train_core.rl.types import TrajectoryGroup, has_reward_spread
from train_core.types import TokensWithLogprobs

_PROPERTY = settings(max_examples=30, deadline=None)
"""Property tests here run 30 examples with no deadline (the suite's time budget; a busy machine)."""

# -- dynamic sampling ------------------------------------------------------------------------------


def test_batch_fill_hand_worked() -> None:
    constant, mixed = single_turn_group([1.0, 1.0]), single_turn_group([1.0, 0.0])
    fill = trajectory_batch_fill(target=2, max_rounds=3).add_round([constant, mixed])
    assert (fill.kept, fill.done, fill.missing()) == ((mixed,), False, 1)
    other = single_turn_group([0.0, 0.5])
    fill = fill.add_round([other, mixed])
    assert fill.full and fill.done and fill.batch() == [mixed, other]  # the surplus is left out
    assert fill.metrics() == {
        "dynamic_sampling/rounds": 2.0,
        "dynamic_sampling/groups_sampled": 4.0,
        "dynamic_sampling/groups_dropped": 1.0,
        "dynamic_sampling/fill": 1.0,
    }
    with pytest.raises(InvalidInputError, match="already full or out of rounds"):
        fill.add_round([mixed])


def test_batch_fill_stops_when_rounds_run_out_and_reports_the_shortfall() -> None:
    fill = trajectory_batch_fill(target=4, max_rounds=2)
    for _ in range(2):
        fill = fill.add_round([single_turn_group([0.0, 0.0]), single_turn_group([1.0, 0.0])])
    assert fill.done and not fill.full and len(fill.batch()) == 2
    assert fill.metrics()["dynamic_sampling/fill"] == 0.5
    with pytest.raises(InvalidInputError, match="target >= 1 and max_rounds >= 1"):
        trajectory_batch_fill(target=4, max_rounds=0)


_GROUPS = st.lists(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=4), min_size=0, max_size=5)


@_PROPERTY
@given(st.lists(_GROUPS, min_size=1, max_size=4), st.integers(1, 6), st.integers(1, 4))
def test_batch_fill_keeps_only_informative_groups_in_order(
    rounds: list[list[list[float]]], target: int, max_rounds: int
) -> None:
    fill = BatchFill[list[float]](target, max_rounds, lambda rewards: rewards)
    used = 0
    for groups in rounds:
        if fill.done:
            break
        fill, used = fill.add_round(groups), used + 1
    informative = [g for groups in rounds[:used] for g in groups if len(set(g)) > 1]
    assert fill.batch() == informative[:target]
    assert fill.rounds == used <= max_rounds
    assert fill.dropped == sum(len(groups) for groups in rounds[:used]) - len(informative)


def _verl_dapo_keeps(rewards_G: list[float]) -> bool:
    """verl recipe/dapo dapo_ray_trainer: keep a prompt when `np.std(metric_vals) > 0` or it has
    a single sample (ours drops singletons too: their group advantage is 0, see the module)."""
    return bool(np.std(rewards_G) > 0) or len(rewards_G) == 1


@_PROPERTY
@given(st.lists(st.sampled_from([0.0, 1.0, 0.25, -1.0]), min_size=2, max_size=8))
def test_group_filter_matches_verl_dapo_on_groups_of_two_or_more(rewards: list[float]) -> None:
    assert has_reward_spread(rewards) == _verl_dapo_keeps(rewards)
    assert not has_reward_spread(rewards[:1])


# -- overlong reward shaping -----------------------------------------------------------------------


@pytest.mark.parametrize(("length", "penalty"), [(10, 0.0), (16, 0.0), (18, -0.5), (20, -1.0), (25, -1.0)])
def test_overlong_penalty_hand_worked(length: int, penalty: float) -> None:
    """L_max 20, buffer 4: free up to 16, then -1/4 per token, -1 at (and past) the budget."""
    assert overlong_penalty(length, max_tokens=20, buffer_tokens=4) == pytest.approx(penalty)


def _verl_dapo_overlong(valid_response_length: int, max_resp_len: int, buffer_len: int, factor: float) -> float:
    """verl reward_manager/dapo.py: expected_len = max_resp_len - buffer_len, exceed_len =
    length - expected_len, overlong_reward = min(-exceed_len / buffer_len * factor, 0)."""
    exceed_len = valid_response_length - (max_resp_len - buffer_len)
    return min(-exceed_len / buffer_len * factor, 0)


@_PROPERTY
@given(st.integers(1, 64), st.data(), st.floats(0.1, 2.0))
def test_overlong_penalty_matches_verl_within_the_budget_and_never_undershoots(
    max_tokens: int, data: st.DataObject, factor: float
) -> None:
    buffer = data.draw(st.integers(1, max_tokens))
    length = data.draw(st.integers(0, max_tokens))
    ours = overlong_penalty(length, max_tokens, buffer, factor)
    assert ours == pytest.approx(_verl_dapo_overlong(length, max_tokens, buffer, factor), abs=1e-12)
    assert -factor <= ours <= 0
    assert overlong_penalty(max_tokens + 100, max_tokens, buffer, factor) == -factor  # past the budget: DAPO's -1


def test_shaping_adds_the_penalty_to_the_final_reward_and_buffer_defaults() -> None:
    group = TrajectoryGroup(
        [trajectory(transition([1], [5] * n, reward=1.0, done=True)) for n in (4, 10)],
        final_rewards_G=[0.5, 0.5],
        metrics_G=[{}, {}],
    )
    (shaped,), metrics = shape_overlong_rewards([group], max_tokens=10, buffer_tokens=4)
    assert shaped.get_total_rewards() == [1.5, 0.5]
    assert metrics == {"overlong/penalized_fraction": 0.5, "overlong/mean_penalty": -0.5}
    assert default_buffer_tokens(20480) == 4096 and default_buffer_tokens(16) == 3 and default_buffer_tokens(2) == 1
    with pytest.raises(InvalidInputError, match=r"overlong buffer must be in \[1, max_tokens=10\]"):
        overlong_penalty(5, max_tokens=10, buffer_tokens=11)


# -- overlong filtering ----------------------------------------------------------------------------


def test_filtering_masks_out_truncated_replies_only() -> None:
    cut_turn = transition([1], [5, 6], reward=1.0, done=True)
    cut = trajectory(replace(cut_turn, ac=TokensWithLogprobs([5, 6], [-0.5, -0.5], "length")))
    whole = trajectory(transition([1], [7, 8], reward=0.0, done=True))
    assert is_truncated(cut) and not is_truncated(whole)
    groups = [TrajectoryGroup([cut, whole], [0.0, 0.0], [{}, {}])]
    data, metadata = assemble_training_data(groups, [torch.tensor([0.5, -0.5])])
    filtered, metrics = filter_overlong(data, metadata, groups)
    assert filtered[0].loss_fn_inputs["mask"].tolist() == [0.0, 0.0]
    assert filtered[0].loss_fn_inputs["advantages"].tolist() == [0.0, 0.0]
    assert filtered[1].loss_fn_inputs["mask"].tolist() == [1.0, 1.0]
    assert filtered[1].loss_fn_inputs["advantages"].tolist() == [-0.5, -0.5]
    assert metrics == {"overlong/filtered_fraction": 0.5}
