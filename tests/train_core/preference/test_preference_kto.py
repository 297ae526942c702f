"""KTO's loss on sequence log-ratios, its custom loss on per-token logprobs, and unpaired data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from train_core.errors import DataFormatError
from train_core.preference.datasets import load_unpaired
from train_core.preference.kto import KtoParams, kto_loss, make_kto_custom_loss
from train_core.types import Datum, ModelInput, TensorData


def _t(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_at_the_reference_every_loss_is_half_its_weight() -> None:
    params = KtoParams(beta=0.3, desirable_weight=1.0, undesirable_weight=3.0)
    loss, metrics = kto_loss(_t([0.0, 0.0, 0.0]), torch.tensor([True, False, False]), _t([0.0, 0.0, 0.0]), params)
    assert loss.item() == pytest.approx((0.5 + 1.5 + 1.5) / 3)
    assert metrics["kl"] == 0.0 and metrics["reward_margin"] == 0.0 and metrics["accuracy"] == 0.0


def test_hand_computed_value_with_a_positive_reference_point() -> None:
    # r = [1, -2], desirable, undesirable; mismatched log-ratios mean 0.5 -> z = 0.5, beta = 0.5
    loss, metrics = kto_loss(_t([1.0, -2.0]), torch.tensor([True, False]), _t([0.2, 0.8]), KtoParams(beta=0.5))
    sigma = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    expected = ((1 - sigma(0.5 * (1.0 - 0.5))) + (1 - sigma(0.5 * (0.5 + 2.0)))) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    assert metrics["kl"] == pytest.approx(0.5)
    assert metrics["desirable_reward"] == pytest.approx(0.5) and metrics["undesirable_reward"] == pytest.approx(-1.0)
    assert metrics["accuracy"] == 1.0


def test_the_reference_point_is_clamped_at_zero_and_carries_no_gradient() -> None:
    logratio = _t([0.4, 0.1]).requires_grad_(True)
    kl = _t([-3.0, -1.0]).requires_grad_(True)
    loss, metrics = kto_loss(logratio, torch.tensor([True, False]), kl, KtoParams(beta=1.0))
    loss.backward()
    assert metrics["kl"] == 0.0
    assert kl.grad is None
    assert logratio.grad is not None
    assert logratio.grad[0] < 0 < logratio.grad[1]  # raise the desirable, lower the undesirable


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="one shape"):
        kto_loss(_t([0.0, 1.0]), torch.tensor([True]), _t([0.0]), KtoParams())


def _datum(n: int) -> Datum:
    weights = torch.ones(n)
    return Datum(
        ModelInput.from_ints(list(range(n))),
        {
            "target_tokens": TensorData.from_torch(torch.zeros(n, dtype=torch.long)),
            "weights": TensorData.from_torch(weights),
        },
    )


def test_custom_loss_sums_tokens_and_splits_examples_from_mismatched_pairs() -> None:
    data = [_datum(2), _datum(3), _datum(2), _datum(3)]
    policy = [_t([-1.0, -1.0]), _t([-2.0, -2.0, -2.0]), _t([-1.0, -1.0]), _t([-1.0, -1.0, -1.0])]
    ref = [_t([-1.5, -1.5]), _t([-1.0, -1.0, -1.0]), _t([-1.0, -1.0]), _t([-1.0, -1.0, -1.0])]
    loss_fn = make_kto_custom_loss(ref, [True, False], KtoParams(beta=1.0))
    tensors = [lp.clone().requires_grad_(True) for lp in policy]
    loss, metrics = loss_fn(data, tensors)
    expected, _ = kto_loss(_t([1.0, -3.0]), torch.tensor([True, False]), _t([0.0, 0.0]), KtoParams(beta=1.0))
    assert loss.item() == pytest.approx(expected.item())
    assert metrics["num_tokens"] == 5.0
    loss.backward()
    assert tensors[2].grad is None or tensors[2].grad.abs().sum() == 0  # mismatched pairs: no gradient
    with pytest.raises(ValueError, match="mismatched pairs"):
        loss_fn(data[:3], tensors[:3])


def _write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_unpaired_records_and_comparisons_in_one_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "kto.jsonl",
        [
            {"prompt": "Hi", "completion": "Hello!", "label": True},
            {"prompt": [{"role": "user", "content": "Hi"}], "completion": "Go away.", "label": False},
            {"prompt": "2+2?", "chosen": "4", "rejected": "5"},
            {"prompt": "Hi", "completion": "  ", "label": True},
        ],
    )
    examples, report = load_unpaired(path, "comparisons")
    assert [(x.prompt[-1]["content"], x.completion[0]["content"], x.desirable) for x in examples] == [
        ("Hi", "Hello!", True),
        ("Hi", "Go away.", False),
        ("2+2?", "4", True),
        ("2+2?", "5", False),
    ]
    assert report.counts == {"empty_completion": 1} and report.first_lines["empty_completion"] == [4]


def test_a_label_that_is_not_a_boolean_names_the_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "kto.jsonl",
        [{"prompt": "a", "completion": "b", "label": True}, {"prompt": "a", "completion": "b", "label": "yes"}],
    )
    with pytest.raises(DataFormatError, match=r"kto.jsonl.*2.*'label' must be true"):
        load_unpaired(path, "comparisons")
