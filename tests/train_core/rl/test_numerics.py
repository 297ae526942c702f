"""Per-turn sampler/trainer agreement (`train_core.rl.numerics`) on hand-made datums."""

from __future__ import annotations

import pytest
import torch

from train_core.rl.numerics import action_runs, turn_agreement
from train_core.types import Datum, ModelInput, TensorData


def datum(sampled: list[float], mask: list[float]) -> Datum:
    return Datum(
        ModelInput.from_ints(list(range(len(mask)))),
        {
            "target_tokens": TensorData.from_list([1] * len(mask), "int64"),
            "logprobs": TensorData.from_list(sampled, "float32"),
            "mask": TensorData.from_list(mask, "float32"),
        },
    )


def test_action_runs_are_the_maximal_runs_of_mask() -> None:
    assert action_runs(torch.tensor([0.0, 1, 1, 0, 0, 1, 0, 1, 1])) == [(1, 3), (5, 6), (7, 9)]
    assert action_runs(torch.tensor([1.0, 1])) == [(0, 2)]
    assert action_runs(torch.tensor([0.0, 0])) == []


def test_turns_are_compared_run_by_run_across_datums() -> None:
    # datum 0: turn 0 at 1-2 (diffs 0.5, -0.5), turn 1 at 4 (diff 2); datum 1: turn 0 at 0 (diff 1)
    first = datum([0.0, -1.0, -2.0, 0.0, -1.0], [0, 1, 1, 0, 1])
    second = datum([-3.0, 0.0], [1, 0])
    trained = [torch.tensor([9.0, -1.5, -1.5, 9.0, -3.0]), torch.tensor([-4.0, 9.0])]
    rows = turn_agreement([first, second], trained)
    assert [(r.turn, r.tokens) for r in rows] == [(0, 3), (1, 1)]
    assert rows[0].depth == pytest.approx(0.5)  # starts at 1 and 0
    assert rows[0].kl_v1 == pytest.approx((0.5 - 0.5 + 1.0) / 3)
    assert rows[0].kl_v2 == pytest.approx(0.5 * (0.25 + 0.25 + 1.0) / 3)
    assert rows[0].max_abs_diff == pytest.approx(1.0)
    assert (rows[1].depth, rows[1].kl_v1, rows[1].max_abs_diff) == (4, pytest.approx(2.0), pytest.approx(2.0))


def test_equal_logprobs_agree_exactly_and_misaligned_ones_are_refused() -> None:
    sampled = [0.0, -0.25, -0.75]
    rows = turn_agreement([datum(sampled, [0, 1, 1])], [torch.tensor(sampled)])
    assert rows[0].max_abs_diff == 0.0 == rows[0].kl_v1
    with pytest.raises(ValueError, match="training logprobs"):
        turn_agreement([datum(sampled, [0, 1, 1])], [torch.tensor([0.0, 1.0])])
