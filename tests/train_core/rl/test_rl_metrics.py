"""Sampler/trainer agreement metrics and rollout statistics, on hand-worked batches."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given
from rl_test_factories import single_turn_group, trajectory, transition

from train_core.rl.data_processing import trajectory_to_data
from train_core.rl.policy_objective import compute_kl_sample_train, train_step_metrics
from train_core.rl.rollouts import compute_trajectory_metrics
from train_core.rl.types import TrajectoryGroup
from train_core.types import Datum, ForwardBackwardOutput, OptimStepOutput


def two_datums() -> list[Datum]:
    """Sampled logprobs [0, -1, -2] with mask [0, 1, 1], and [-0.5] with mask [1]."""
    (d1,) = trajectory_to_data(trajectory(transition([10, 11], [12, 13], logprobs=[-1.0, -2.0])), 0.5)
    (d2,) = trajectory_to_data(trajectory(transition([20], [21], logprobs=[-0.5])), -0.5)
    return [d1, d2]


def test_kl_sample_train_hand_worked() -> None:
    # The first training logprob sits on an observation token and must be ignored.
    training = [torch.tensor([-5.0, -1.5, -1.0]), torch.tensor([-0.25])]
    # d = sampling - training on action tokens: 0.5, -1.0, -0.25.
    metrics = compute_kl_sample_train(two_datums(), training)
    assert metrics == {
        "optim/kl_sample_train_v1": pytest.approx(-0.25),
        "optim/kl_sample_train_v2": pytest.approx(0.5 * (0.25 + 1.0 + 0.0625) / 3),
        "optim/entropy": pytest.approx(3.5 / 3),
    }


def test_kl_sample_train_is_zero_on_policy() -> None:
    data = two_datums()
    metrics = compute_kl_sample_train(data, [d.loss_fn_inputs["logprobs"].to_torch() for d in data])
    assert metrics["optim/kl_sample_train_v1"] == 0.0
    assert metrics["optim/kl_sample_train_v2"] == 0.0


def test_kl_sample_train_rejects_misaligned_logprobs_and_action_free_batches() -> None:
    with pytest.raises(ValueError, match="datum 0"):
        compute_kl_sample_train(two_datums(), [torch.zeros(2), torch.zeros(1)])
    (obs_only,) = trajectory_to_data(trajectory(transition([1, 2, 3], [])), 0.0)
    with pytest.raises(ValueError, match="no action tokens"):
        compute_kl_sample_train([obs_only], [torch.zeros(2)])


@given(st.lists(st.floats(-20, 0), min_size=3, max_size=3), st.lists(st.floats(-20, 0), min_size=3, max_size=3))
def test_kl_v2_is_never_negative_and_bounds_v1(sampled: list[float], training: list[float]) -> None:
    (datum,) = trajectory_to_data(trajectory(transition([1], [2, 3, 4], logprobs=sampled)), 1.0)
    metrics = compute_kl_sample_train([datum], [torch.tensor(training)])
    v1, v2 = metrics["optim/kl_sample_train_v1"], metrics["optim/kl_sample_train_v2"]
    assert v2 >= 0.0
    assert 0.5 * v1**2 <= v2 + 1e-9  # mean(d)^2 <= mean(d^2)


def batch() -> tuple[list[TrajectoryGroup], list[list[str]]]:
    """A: rewards 1, 0 (mixed). B: one two-turn episode, total 1 (all good). C: rewards 0, 0 (all bad)."""
    group_a = TrajectoryGroup(
        [
            trajectory(transition([1, 2], [3], reward=1.0, done=True, metrics={"correct": 1.0})),
            trajectory(transition([1, 2], [4], reward=0.0, done=True, metrics={"correct": 0.0})),
        ],
        final_rewards_G=[0.0, 0.0],
        metrics_G=[{}, {}],
    )
    group_b = TrajectoryGroup(
        [
            trajectory(
                transition([1, 2], [3, 4], reward=0.25, metrics={"correct": 0.0}),
                transition([1, 2, 3, 4, 5], [6], reward=0.75, done=True),
            )
        ],
        final_rewards_G=[0.0],
        metrics_G=[{"judge": 2.0}],
    )
    group_c = TrajectoryGroup(
        [trajectory(transition([1, 2], [3], done=True, metrics={"correct": 0.0})) for _ in range(2)],
        final_rewards_G=[0.0, 0.0],
        metrics_G=[{}, {}],
    )
    return [group_a, group_b, group_c], [["math"], ["code"], ["math"]]


def test_trajectory_metrics_hand_worked() -> None:
    groups, tags = batch()
    m = compute_trajectory_metrics(groups, tags)
    assert m["env/all/reward/total"] == pytest.approx(2.0 / 5)
    assert m["env/all/turns_per_episode"] == pytest.approx(6 / 5)
    assert m["env/all/ac_tokens_per_turn"] == pytest.approx(7 / 6)
    assert m["env/all/ob_tokens_per_turn"] == pytest.approx(15 / 6)
    assert m["env/all/total_episodes"] == 5
    assert m["env/all/correct"] == pytest.approx(1 / 5)  # mean over the transitions that report it
    assert m["env/all/judge"] == 2.0
    assert m["env/all/by_group/frac_mixed"] == pytest.approx(1 / 3)
    assert m["env/all/by_group/frac_all_good"] == pytest.approx(1 / 3)
    assert m["env/all/by_group/frac_all_bad"] == pytest.approx(1 / 3)

    assert m["env/math/reward/total"] == pytest.approx(1 / 4)
    assert m["env/math/by_group/frac_mixed"] == 0.5
    assert m["env/math/by_group/frac_all_bad"] == 0.5
    assert m["env/math/correct"] == pytest.approx(1 / 4)
    assert m["env/code/reward/total"] == 1.0
    assert m["env/code/turns_per_episode"] == 2.0
    assert m["env/code/by_group/frac_all_good"] == 1.0


def test_a_tag_every_group_shares_is_still_reported() -> None:
    groups, _ = batch()
    m = compute_trajectory_metrics(groups, [["math", "all_tasks"], ["all_tasks"], ["all_tasks"]])
    assert {k.removeprefix("env/all_tasks/") for k in m if k.startswith("env/all_tasks/")} == {
        k.removeprefix("env/all/") for k in m if k.startswith("env/all/")
    }
    assert m["env/all_tasks/reward/total"] == m["env/all/reward/total"]
    assert m["env/math/reward/total"] == 0.5


def test_good_threshold_decides_all_good_versus_all_bad() -> None:
    groups = [single_turn_group([0.3, 0.3])]
    assert compute_trajectory_metrics(groups, [[]])["env/all/by_group/frac_all_bad"] == 1.0
    assert compute_trajectory_metrics(groups, [[]], good_threshold=0.3)["env/all/by_group/frac_all_good"] == 1.0


def test_trajectory_metrics_reject_empty_input_and_misaligned_tags() -> None:
    with pytest.raises(ValueError, match="at least one trajectory"):
        compute_trajectory_metrics([], [])
    with pytest.raises(ValueError):
        compute_trajectory_metrics([single_turn_group([1.0])], [])


def test_train_step_metrics_report_clip_fractions_over_the_whole_step() -> None:
    """Two substeps' counts add up before dividing: 1 of 2 and 3 of 8 policy tokens clipped low
    is 4 of 10 for the step, not the mean of 1/2 and 3/8."""
    data = two_datums()
    outputs = [
        ForwardBackwardOutput(
            [{"logprobs": d.loss_fn_inputs["logprobs"]}],
            {"loss:sum": s, "loss/clipped_low:sum": low, "loss/clipped_high:sum": 0.0, "loss/policy_tokens:sum": n},
        )
        for d, s, low, n in zip(data, (1.0, 2.0), (1.0, 3.0), (2.0, 8.0), strict=True)
    ]
    metrics = train_step_metrics(data, outputs, [OptimStepOutput(), OptimStepOutput()])
    assert metrics["optim/loss:sum"] == 3.0
    assert metrics["loss/clipfrac_low"] == pytest.approx(0.4) and metrics["loss/clipfrac_high"] == 0.0
    plain = [ForwardBackwardOutput(o.loss_fn_outputs, {"loss:sum": 1.0}) for o in outputs]
    assert not any(key.startswith("loss/") for key in train_step_metrics(data, plain, [OptimStepOutput()]))
