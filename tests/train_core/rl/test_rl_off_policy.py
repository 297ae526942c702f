"""Off-policy corrections (TIS, MIS) and the sampler/trainer mismatch metrics: hand-worked,
properties, and a cross-check against verl's rollout correction on the same tensors."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from rl_test_factories import trajectory, transition

from train_core.errors import InvalidInputError
from train_core.losses import get_loss_fn
from train_core.rl.data_processing import trajectory_to_data
from train_core.rl.policy_objective import (
    RolloutCorrection,
    correct_off_policy,
    mis_keep,
    mismatch_metrics,
    tis_weights,
)
from train_core.types import Datum

_PROPERTY = settings(max_examples=30, deadline=None)
"""Property tests here run 30 examples with no deadline (the suite's time budget; a busy machine)."""


def _datum(sampled: list[float], advantage: float = 1.0) -> Datum:
    """One observation token then the sampled action tokens: targets [ob, *actions]."""
    (datum,) = trajectory_to_data(
        trajectory(transition([10, 11], list(range(12, 12 + len(sampled))), logprobs=sampled)), advantage
    )
    return datum


def _trainer(datum: Datum, drift: list[float]) -> torch.Tensor:
    """Trainer logprobs: the sampled ones plus `drift` on the action tokens (the observation
    token gets an arbitrary value, which must be ignored)."""
    sampled = datum.loss_fn_inputs["logprobs"].to_torch().double()
    return sampled + torch.tensor([-3.0, *drift], dtype=torch.float64)


def test_hand_worked_corrections() -> None:
    """Actions sampled at [-1, -2]; the trainer's ratios w = [3, 1] (product 3, geometric sqrt 3)."""
    datum = _datum([-1.0, -2.0])
    trainer = [_trainer(datum, [math.log(3.0), 0.0])]

    def corrected(**kwargs: object) -> tuple[list[float], list[float]]:
        (out,), _ = correct_off_policy([datum], trainer, RolloutCorrection(**kwargs), "ppo")  # type: ignore[arg-type]
        advantages, mask = out.loss_fn_inputs["advantages"].tolist(), out.loss_fn_inputs["mask"].tolist()
        return [float(a) for a in advantages], [float(m) for m in mask]

    assert corrected() == ([0.0, 1.0, 1.0], [0.0, 1.0, 1.0])
    assert corrected(tis="token", tis_cap=2.0) == ([0.0, 2.0, 1.0], [0.0, 1.0, 1.0])
    assert corrected(tis="sequence", tis_cap=2.5) == ([0.0, 2.5, 2.5], [0.0, 1.0, 1.0])
    assert corrected(mis="token", mis_high=2.0) == ([0.0, 0.0, 1.0], [0.0, 0.0, 1.0])
    assert corrected(mis="sequence", mis_high=2.0) == ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    assert corrected(mis="geometric", mis_high=2.0) == ([0.0, 1.0, 1.0], [0.0, 1.0, 1.0])
    _, metrics = correct_off_policy([datum], trainer, RolloutCorrection(tis="token", mis="token", mis_high=2.5), "ppo")
    assert metrics == {
        "mismatch/kl": pytest.approx(-math.log(3.0) / 2),
        "mismatch/ratio_mean": pytest.approx(2.0),
        "mismatch/ratio_max": pytest.approx(3.0),
        "mismatch/ratio_min": pytest.approx(1.0),
        "mismatch/masked_fraction": 0.5,
        "mismatch/truncated_fraction": 0.5,
    }


_DRIFTS = st.lists(st.lists(st.floats(-1.5, 1.5), min_size=1, max_size=6), min_size=1, max_size=4)


@_PROPERTY
@given(_DRIFTS, st.floats(0.5, 4.0), st.sampled_from(["token", "sequence"]))
def test_tis_never_raises_a_weight_above_the_cap(drifts: list[list[float]], cap: float, level: str) -> None:
    data = [_datum([-1.0] * len(d), advantage=-2.0) for d in drifts]
    trainer = [_trainer(datum, d) for datum, d in zip(data, drifts, strict=True)]
    out, _ = correct_off_policy(data, trainer, RolloutCorrection(tis=level, tis_cap=cap), "importance_sampling")  # type: ignore[arg-type]
    for datum, drift in zip(out, drifts, strict=True):
        weights = [-a / 2.0 for a in datum.loss_fn_inputs["advantages"].tolist()[1:]]
        assert all(0 < w <= cap * (1 + 1e-6) for w in weights)
        if level == "token":
            assert weights == pytest.approx([min(math.exp(x), cap) for x in drift], rel=1e-5)
        else:
            assert len(set(weights)) == 1  # one weight per sequence


@_PROPERTY
@given(_DRIFTS, st.floats(1.1, 3.0), st.sampled_from(["token", "sequence", "geometric"]))
def test_mis_masks_exactly_what_leaves_the_band_and_masked_tokens_get_no_gradient(
    drifts: list[list[float]], high: float, level: str
) -> None:
    data = [_datum([-1.0] * len(d)) for d in drifts]
    trainer = [_trainer(datum, d) for datum, d in zip(data, drifts, strict=True)]
    out, metrics = correct_off_policy(data, trainer, RolloutCorrection(mis=level, mis_high=high), "ppo")  # type: ignore[arg-type]
    masked = total = 0
    for datum, drift in zip(out, drifts, strict=True):
        if level == "token":
            expected = [1.0 / high <= math.exp(x) <= high for x in drift]
        else:
            log_w = sum(drift) if level == "sequence" else sum(drift) / len(drift)
            expected = [1.0 / high <= math.exp(log_w) <= high] * len(drift)
        assert [m > 0 for m in datum.loss_fn_inputs["mask"].tolist()[1:]] == expected
        masked, total = masked + expected.count(False), total + len(drift)
        lp = torch.tensor(datum.loss_fn_inputs["logprobs"].tolist(), dtype=torch.float64) + 0.3
        lp.requires_grad_()
        inputs = {k: datum.loss_fn_inputs[k].to_torch().double() for k in ("logprobs", "advantages")}
        get_loss_fn("ppo")(lp, inputs)[0].backward()
        assert lp.grad is not None
        assert all(g == 0 for g, keep in zip(lp.grad.tolist()[1:], expected, strict=True) if not keep)
    assert metrics["mismatch/masked_fraction"] == pytest.approx(masked / total)


@_PROPERTY
@given(_DRIFTS)
def test_on_policy_changes_nothing(drifts: list[list[float]]) -> None:
    data = [_datum([-0.5] * len(d)) for d in drifts]
    trainer = [datum.loss_fn_inputs["logprobs"].to_torch() for datum in data]
    correction = RolloutCorrection(tis="sequence", mis="token")
    out, metrics = correct_off_policy(data, trainer, correction, "ppo")
    assert [d.loss_fn_inputs["advantages"].tolist() for d in out] == [
        d.loss_fn_inputs["advantages"].tolist() for d in data
    ]
    assert metrics["mismatch/kl"] == 0.0 and metrics["mismatch/ratio_max"] == 1.0
    assert metrics["mismatch/masked_fraction"] == 0.0


def _verl_is_weights(log_ratio: torch.Tensor, mask: torch.Tensor, level: str, threshold: float) -> torch.Tensor:
    """verl rollout_corr_helper.compute_rollout_correction_weights: token = exp(clamp(lr, +-20));
    sequence = exp(clamp(masked_sum(lr), +-20)) broadcast; times the mask; truncated at the
    threshold."""
    if level == "token":
        weights = torch.exp(torch.clamp(log_ratio, -20, 20))
    else:
        weights = torch.exp(torch.clamp((log_ratio * mask).sum(-1, keepdim=True), -20, 20)).expand_as(log_ratio)
    return (weights * mask).clamp(max=threshold)


def _verl_rejection_mask(log_ratio: torch.Tensor, mask: torch.Tensor, level: str, upper: float) -> torch.Tensor:
    """verl rollout_corr_helper.compute_rollout_rejection_mask: the token ratio, the sequence's
    product or its geometric mean (masked mean of lr), kept where in [1/upper, upper]; applied to
    the response mask."""
    if level == "token":
        lr = log_ratio
    elif level == "sequence":
        lr = (log_ratio * mask).sum(-1, keepdim=True)
    else:
        lr = ((log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)).expand_as(log_ratio)
    weights = torch.exp(torch.clamp(lr, -20, 20)).expand_as(log_ratio)
    return mask * ((weights >= 1.0 / upper) & (weights <= upper)).double()


@_PROPERTY
@given(
    st.lists(st.lists(st.floats(-2, 2), min_size=4, max_size=4), min_size=1, max_size=4),
    st.lists(st.integers(1, 4), min_size=4, max_size=4),
    st.floats(1.05, 3.0),
)
def test_tis_weights_and_mis_masks_match_verl(
    log_ratios: list[list[float]], lengths: list[int], threshold: float
) -> None:
    lr = torch.tensor(log_ratios, dtype=torch.float64)
    mask = torch.tensor([[1.0] * n + [0.0] * (4 - n) for n in lengths[: len(log_ratios)]], dtype=torch.float64)
    for level in ("token", "sequence"):
        ours = torch.stack([tis_weights(r, m, level, threshold) for r, m in zip(lr, mask, strict=True)])
        assert torch.allclose(ours, _verl_is_weights(lr, mask, level, threshold), rtol=1e-9, atol=0)
    for level in ("token", "sequence", "geometric"):
        kept = torch.stack([mis_keep(r, m, level, 1.0 / threshold, threshold) for r, m in zip(lr, mask, strict=True)])  # type: ignore[arg-type]
        assert kept.double().tolist() == _verl_rejection_mask(lr, mask, level, threshold).tolist()


def test_mismatch_metrics_use_action_tokens_only_and_bad_settings_are_errors() -> None:
    datum = _datum([-1.0, -1.0])
    assert mismatch_metrics([datum], [_trainer(datum, [0.0, 0.0])])["mismatch/ratio_min"] == 1.0
    with pytest.raises(InvalidInputError, match="mis needs 0 < mis_low <= mis_high"):
        RolloutCorrection(mis="token", mis_high=2.0, mis_low=3.0)
    with pytest.raises(InvalidInputError, match="tis must be token, sequence or None"):
        RolloutCorrection(tis="geometric")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="loss 'dro' does not scale each token's loss"):
        correct_off_policy([datum], [_trainer(datum, [0.0, 0.0])], RolloutCorrection(tis="token"), "dro")
