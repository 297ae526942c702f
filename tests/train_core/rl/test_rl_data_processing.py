"""Trajectories to datums: prefix merging across turns, masks, metadata, group filtering."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given
from rl_test_factories import single_turn_group, trajectory, transition

from train_core.losses import get_loss_fn
from train_core.rl.data_processing import (
    assemble_training_data,
    compute_advantages,
    remove_constant_reward_groups,
    remove_mask,
    trajectory_to_data,
)
from train_core.rl.kl_penalty import incorporate_kl_penalty
from train_core.rl.types import Trajectory, TrajectoryGroup
from train_core.types import Datum

Fields = dict[str, list[float] | list[int]]


def fields(datum: Datum) -> Fields:
    out: Fields = {"input": datum.model_input.to_ints()}
    for key, value in datum.loss_fn_inputs.items():
        out[key] = value.tolist()
    return out


def assert_datum(datum: Datum, expected: Fields) -> None:
    got = fields(datum)
    assert set(got) == set(expected)
    for key, values in expected.items():
        assert got[key] == pytest.approx(values), key


TWO_TURNS = (
    transition([1, 2, 3], [4, 5], logprobs=[-0.1, -0.2]),
    # The second observation extends everything so far ([1..5]) with [6, 7].
    transition([1, 2, 3, 4, 5, 6, 7], [8], logprobs=[-0.3], done=True),
)
MERGED: Fields = {
    "input": [1, 2, 3, 4, 5, 6, 7],
    "target_tokens": [2, 3, 4, 5, 6, 7, 8],
    "logprobs": [0, 0, -0.1, -0.2, 0, 0, -0.3],
    "advantages": [0, 0, 0.5, 0.5, 0, 0, 0.5],
    "mask": [0, 0, 1, 1, 0, 0, 1],
}


def test_single_turn_datum_is_shifted_like_supervised_data() -> None:
    (datum,) = trajectory_to_data(trajectory(transition([10, 11], [12, 13], logprobs=[-1.0, -2.0])), -0.25)
    assert_datum(
        datum,
        {
            "input": [10, 11, 12],
            "target_tokens": [11, 12, 13],
            "logprobs": [0, -1.0, -2.0],
            "advantages": [0, -0.25, -0.25],
            "mask": [0, 1, 1],
        },
    )


def test_turns_whose_observation_extends_the_sequence_merge_into_one_datum() -> None:
    (datum,) = trajectory_to_data(trajectory(*TWO_TURNS), 0.5)
    assert_datum(datum, MERGED)


def test_an_observation_that_does_not_extend_the_sequence_starts_a_new_datum() -> None:
    rewritten = transition([1, 2, 9], [11], logprobs=[-0.4], done=True)  # diverges at the 3rd token
    first, second = trajectory_to_data(trajectory(*TWO_TURNS, rewritten), 0.5)
    assert_datum(first, MERGED)
    assert_datum(
        second,
        {
            "input": [1, 2, 9],
            "target_tokens": [2, 9, 11],
            "logprobs": [0, 0, -0.4],
            "advantages": [0, 0, 0.5],
            "mask": [0, 0, 1],
        },
    )


def test_an_observation_shorter_than_the_sequence_starts_a_new_datum() -> None:
    data = trajectory_to_data(trajectory(transition([1, 2], [3]), transition([1, 2], [4], done=True)), 1.0)
    assert [d.model_input.to_ints() for d in data] == [[1, 2], [1, 2]]
    assert [d.loss_fn_inputs["target_tokens"].tolist() for d in data] == [[2, 3], [2, 4]]


def test_empty_observation_delta_appends_the_action_right_after_the_previous_one() -> None:
    data = trajectory_to_data(trajectory(transition([1, 2], [3]), transition([1, 2, 3], [4], done=True)), 1.0)
    assert len(data) == 1
    assert_datum(
        data[0],
        {
            "input": [1, 2, 3],
            "target_tokens": [2, 3, 4],
            "logprobs": [0, -0.5, -0.5],
            "advantages": [0, 1, 1],
            "mask": [0, 1, 1],
        },
    )


def test_action_without_matching_logprobs_is_rejected() -> None:
    with pytest.raises(ValueError, match="2 tokens but 1 logprobs"):
        trajectory_to_data(trajectory(transition([1], [2, 3], logprobs=[-0.1])), 1.0)


def test_a_one_token_sequence_has_nothing_to_train_and_gives_no_datum() -> None:
    assert trajectory_to_data(trajectory(transition([], [5])), 1.0) == []
    # ... but it still ends the datum before it, when the next observation does not extend it.
    data = trajectory_to_data(trajectory(transition([1, 2], [3]), transition([7], []), transition([7, 8], [9])), 1.0)
    assert [d.model_input.to_ints() for d in data] == [[1, 2], [7, 8]]


@st.composite
def chat_like_trajectories(draw: st.DrawFn) -> Trajectory:
    """Multi-turn episodes whose every observation extends the tokens seen and sampled so far."""
    tokens: list[int] = []
    transitions = []
    for _ in range(draw(st.integers(1, 4))):
        tokens = tokens + draw(st.lists(st.integers(0, 50), min_size=1, max_size=5))
        ac = draw(st.lists(st.integers(0, 50), min_size=1, max_size=5))
        lps = draw(st.lists(st.floats(-5, 0), min_size=len(ac), max_size=len(ac)))
        transitions.append(transition(tokens, ac, logprobs=lps))
        tokens = tokens + ac
    return trajectory(*transitions)


@given(chat_like_trajectories(), st.floats(-2, 2))
def test_chat_like_episode_is_one_datum_with_mask_exactly_on_action_tokens(traj: Trajectory, adv: float) -> None:
    (datum,) = trajectory_to_data(traj, adv)
    targets = datum.loss_fn_inputs["target_tokens"].to_torch()
    mask = datum.loss_fn_inputs["mask"].to_torch()
    full = datum.model_input.to_ints() + targets[-1:].tolist()
    last = traj.transitions[-1]
    assert full == last.ob.to_ints() + last.ac.tokens
    acted = mask > 0
    assert targets[acted].tolist() == [t for tr in traj.transitions for t in tr.ac.tokens]
    expected_lps = torch.tensor([lp for tr in traj.transitions for lp in tr.ac.logprobs], dtype=torch.float32)
    assert torch.equal(datum.loss_fn_inputs["logprobs"].to_torch()[acted], expected_lps)
    assert torch.all(datum.loss_fn_inputs["logprobs"].to_torch()[~acted] == 0)
    assert torch.equal(datum.loss_fn_inputs["advantages"].to_torch(), torch.tensor(adv, dtype=torch.float32) * mask)


@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 9), min_size=1, max_size=4), st.lists(st.integers(0, 9), max_size=4)),
        min_size=1,
        max_size=5,
    )
)
def test_any_episode_trains_each_action_token_exactly_once(turns: list[tuple[list[int], list[int]]]) -> None:
    traj = trajectory(*(transition(ob, ac) for ob, ac in turns))
    data = trajectory_to_data(traj, 1.0)
    assert sum(float(d.loss_fn_inputs["mask"].to_torch().sum()) for d in data) == sum(len(ac) for _, ac in turns)
    for d in data:
        n = d.model_input.length
        assert all(v.shape == (n,) for v in d.loss_fn_inputs.values())


def test_assemble_keeps_zero_advantage_groups_and_records_where_datums_came_from() -> None:
    """A constant group has all-zero advantages but still trains under a KL penalty or `dro`."""
    groups = [single_turn_group([1.0, 1.0]), single_turn_group([1.0, 0.0, 0.0])]
    advantages_P = [torch.tensor([0.0, 0.0]), torch.tensor([2 / 3, -1 / 3, -1 / 3])]
    data_D, metadata_D = assemble_training_data(groups, advantages_P)
    assert metadata_D == [{"group_idx": 0, "traj_idx": i} for i in range(2)] + [
        {"group_idx": 1, "traj_idx": i} for i in range(3)
    ]
    assert [d.loss_fn_inputs["advantages"].tolist()[-1] for d in data_D] == pytest.approx([0, 0, 2 / 3, -1 / 3, -1 / 3])


def test_a_constant_group_changes_kl_policy_base_and_the_dro_loss() -> None:
    """Mixed group (sampled logprob -0.5) + constant group (sampled -2.0), base logprob -1.0 everywhere."""
    mixed = single_turn_group([0.0, 1.0, 1.0, 0.0])
    constant = TrajectoryGroup(
        [trajectory(transition([1, 2], [3], logprobs=[-2.0], reward=1.0, done=True)) for _ in range(4)],
        final_rewards_G=[0.0] * 4,
        metrics_G=[{}] * 4,
    )
    groups = [mixed, constant]
    data_D, _ = assemble_training_data(groups, compute_advantages(groups))
    assert len(data_D) == 8
    base_D = [torch.full((d.model_input.length,), -1.0) for d in data_D]
    _, metrics = incorporate_kl_penalty(data_D, base_D, coef=0.1)
    # d = sampled - base: 0.5 on the 4 mixed actions, -1.0 on the 4 constant ones.
    assert metrics["kl_policy_base"] == pytest.approx((4 * 0.5 + 4 * -1.0) / 8)
    # dro's drift term trains the constant group: current logprob -1.5 vs sampled -2.0, beta 1.
    constant_datum = data_D[-1]
    lp_T = torch.where(constant_datum.loss_fn_inputs["mask"].to_torch() > 0, -1.5, 0.0)
    inputs = {k: v.to_torch() for k, v in remove_mask(constant_datum).loss_fn_inputs.items()}
    loss, _ = get_loss_fn("dro")(lp_T, inputs, {"beta": 1.0})
    assert float(loss) == pytest.approx(0.5 * 0.5**2)


def test_assemble_emits_one_metadata_row_per_datum_of_multi_datum_trajectories() -> None:
    rewritten = transition([1, 2, 9], [11], logprobs=[-0.4], done=True)
    group = single_turn_group([0.0, 1.0])
    group.trajectories_G[1] = trajectory(*TWO_TURNS, rewritten)
    data_D, metadata_D = assemble_training_data([group], [torch.tensor([-0.5, 0.5])])
    assert len(data_D) == 3
    assert metadata_D == [
        {"group_idx": 0, "traj_idx": 0},
        {"group_idx": 0, "traj_idx": 1},
        {"group_idx": 0, "traj_idx": 1},
    ]


def test_assemble_rejects_mismatched_advantages() -> None:
    with pytest.raises(ValueError):
        assemble_training_data([single_turn_group([1.0, 0.0])], [torch.tensor([0.5, -0.5, 0.0])])


def test_remove_constant_reward_groups() -> None:
    constant, mixed, also_constant = single_turn_group([1, 1]), single_turn_group([0, 1]), single_turn_group([0, 0])
    assert remove_constant_reward_groups([constant, mixed, also_constant]) == [mixed]
    # Totals count the final group rewards: step rewards 1, 1 with finals 0, 1 are mixed.
    mixed_by_final = single_turn_group([1, 1], final_rewards_G=[0, 1])
    assert remove_constant_reward_groups([constant, mixed_by_final]) == [mixed_by_final]


def test_all_constant_keeps_the_first_group_so_the_batch_is_never_empty() -> None:
    first, second = single_turn_group([1, 1]), single_turn_group([0, 0])
    assert remove_constant_reward_groups([first, second]) == [first]
    assert remove_constant_reward_groups([]) == []


def test_remove_mask_drops_only_the_mask() -> None:
    (datum,) = trajectory_to_data(trajectory(*TWO_TURNS), 0.5)
    stripped = remove_mask(datum)
    assert set(stripped.loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"}
    assert stripped.model_input == datum.model_input
    assert "mask" in datum.loss_fn_inputs  # the original is untouched


def test_remove_mask_hands_gspo_the_mask_as_its_sequence_ratio_mask() -> None:
    (datum,) = trajectory_to_data(trajectory(*TWO_TURNS), 0.5)
    for_gspo = remove_mask(datum, "gspo")
    assert set(for_gspo.loss_fn_inputs) == {"target_tokens", "logprobs", "advantages", "sequence_ratio_mask"}
    assert for_gspo.loss_fn_inputs["sequence_ratio_mask"] == datum.loss_fn_inputs["mask"]
    assert set(remove_mask(datum, "ppo").loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"}
