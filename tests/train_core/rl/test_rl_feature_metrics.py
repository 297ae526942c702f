"""Parse-error masking, stop-reason and parse-error metrics, token accounting and the
post-update KL."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.train_core.rl.rl_test_factories import transition
from train_core.rl.data_processing import (
    assemble_training_data,
    compute_advantages,
    shared_prompt_tokens,
    trajectory_to_data,
)
from train_core.rl.policy_objective import compute_kl_pre_post, trained_tokens
from train_core.rl.rollouts import compute_trajectory_metrics, token_metrics
from train_core.rl.types import EPISODE_STOPS, Trajectory, TrajectoryGroup
from train_core.types import ModelInput


def _traj(*ts, stop="done"):
    return Trajectory(list(ts), ModelInput.empty(), stop_reason=stop)


def test_a_masked_parse_error_turn_has_zero_advantage_and_mask() -> None:
    bad = dataclasses.replace(transition([1, 2], [3, 4]), parse_ok=False)
    good = transition([1, 2, 3, 4, 9], [5], done=True)
    traj = _traj(bad, good)
    (plain,) = trajectory_to_data(traj, 2.0)
    (masked,) = trajectory_to_data(traj, 2.0, mask_parse_errors=True)
    # targets: 2 3 4 9 5 (shifted from tokens 1 2 3 4 9 5)
    assert plain.loss_fn_inputs["mask"].to_torch().tolist() == [0, 1, 1, 0, 1]
    assert masked.loss_fn_inputs["mask"].to_torch().tolist() == [0, 0, 0, 0, 1]
    assert masked.loss_fn_inputs["advantages"].to_torch().tolist() == [0, 0, 0, 0, 2.0]
    assert masked.loss_fn_inputs["logprobs"].to_torch().tolist() == plain.loss_fn_inputs["logprobs"].to_torch().tolist()


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 4)), min_size=1, max_size=6), st.floats(-3, 3))
def test_masking_trains_exactly_the_parsed_turns_tokens(turns: list[tuple[bool, int]], advantage: float) -> None:
    ts = [
        dataclasses.replace(transition([100 + i], [7] * n), parse_ok=ok)  # fresh observations: one datum per turn
        for i, (ok, n) in enumerate(turns)
    ]
    group = TrajectoryGroup([_traj(*ts)], [advantage], [{}])
    data, _ = assemble_training_data([group], compute_advantages([group]), mask_parse_errors=True)
    assert trained_tokens(data) == sum(n for ok, n in turns if ok)
    for d in data:
        mask = d.loss_fn_inputs["mask"].to_torch()
        assert torch.all(d.loss_fn_inputs["advantages"].to_torch()[mask == 0] == 0)


def test_stop_reason_fractions_and_parse_errors_are_reported() -> None:
    bad = dataclasses.replace(transition([1], [2]), parse_ok=False)
    group = TrajectoryGroup(
        [_traj(transition([1], [2])), _traj(bad, stop="max_turns"), _traj(stop="overflow")],
        [0.0, 0.0, 0.0],
        [{}, {}, {}],
        num_failed=1,
    )
    metrics = compute_trajectory_metrics([group], [["t"]])
    stops = {reason: metrics[f"env/all/stop/{reason}"] for reason in EPISODE_STOPS}
    assert stops == {
        "done": 0.25,
        "max_turns": 0.25,
        "max_tokens": 0.0,
        "timeout": 0.0,
        "overflow": 0.25,
        "error": 0.25,
    }
    assert metrics["env/t/stop/done"] == 0.25
    assert metrics["env/all/frac_parse_errors"] == 0.5


def test_shared_prompt_tokens_count_the_context_an_observation_extends() -> None:
    # turn 1 sees [1 2], samples [3]; turn 2 sees [1 2 3 4] (extends 3 tokens), samples [5];
    # turn 3 sees a rewritten context [9] (shares nothing)
    traj = _traj(transition([1, 2], [3]), transition([1, 2, 3, 4], [5]), transition([9], [6]))
    assert shared_prompt_tokens(traj) == 3
    group = TrajectoryGroup([traj], [0.0], [{}])
    assert token_metrics([group]) == {"tokens/prompt": 7.0, "tokens/sampled": 3.0, "tokens/prompt_shared": 3.0}


@given(st.lists(st.lists(st.floats(-5, 0), min_size=1, max_size=5), min_size=1, max_size=4), st.floats(-1, 1))
def test_kl_pre_post_is_zero_without_change_and_v2_never_negative(lps: list[list[float]], shift: float) -> None:
    ts = [transition([50 + i], [7] * len(lp), logprobs=lp) for i, lp in enumerate(lps)]
    group = TrajectoryGroup([_traj(*ts)], [1.0], [{}])
    data, _ = assemble_training_data([group], [torch.tensor([1.0])])
    same = [d.loss_fn_inputs["logprobs"].to_torch() for d in data]
    assert compute_kl_pre_post(data, same)["optim/kl_pre_post"] == pytest.approx(0.0)
    shifted = compute_kl_pre_post(
        data, [t + shift * d.loss_fn_inputs["mask"].to_torch() for t, d in zip(same, data, strict=True)]
    )
    assert shifted["optim/kl_pre_post"] == pytest.approx(-shift, abs=1e-6)
    assert shifted["optim/kl_pre_post_v2"] == pytest.approx(0.5 * shift**2, abs=1e-6)
    assert shifted["optim/kl_pre_post_v2"] >= 0.0
