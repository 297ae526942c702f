"""Loss aggregation modes: hand-worked, properties, cross-checks against verl's `agg_loss` and
TRL's GRPO loss types, and the per-token factors folded into datums giving the same loss and
gradient as aggregating per-token losses."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from train_core.errors import InvalidInputError
from train_core.losses import get_loss_fn
from train_core.rl.policy_objective import AGGREGATION_MODES, aggregate_loss, fold_aggregation, token_scales
from train_core.types import Datum, ModelInput, TensorData

_PROPERTY = settings(max_examples=30, deadline=None)
"""Property tests here run 30 examples with no deadline (the suite's time budget; a busy machine)."""

_LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]], dtype=torch.float64)
_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token_sum", 10.0),  # 1 + 2 + 3 + 4
        ("token_mean", 2.5),  # 10 / 4 tokens
        ("seq_mean_token_sum", 5.0),  # (6 + 4) / 2 sequences (the fully masked third is not one)
        ("seq_mean_token_mean", 3.0),  # (6/3 + 4/1) / 2
        ("seq_mean_token_sum_norm", 1.0),  # 10 / (2 sequences * 5 tokens)
    ],
)
def test_hand_worked_modes(mode: str, expected: float) -> None:
    assert float(aggregate_loss(_LOSS, _MASK, mode, norm_tokens=5)) == pytest.approx(expected)


@st.composite
def _batch(draw: st.DrawFn, equal_lengths: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T] losses and a mask whose rows are prefixes (1..T tokens), as responses are."""
    b, t = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    losses = draw(st.lists(st.floats(-5, 5), min_size=b * t, max_size=b * t))
    lengths = [t] * b if equal_lengths else draw(st.lists(st.integers(1, t), min_size=b, max_size=b))
    mask = torch.tensor([[1.0] * n + [0.0] * (t - n) for n in lengths], dtype=torch.float64)
    return torch.tensor(losses, dtype=torch.float64).reshape(b, t), mask


@_PROPERTY
@given(_batch(equal_lengths=True))
def test_modes_agree_on_equal_length_sequences(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    loss, mask = batch
    t = loss.shape[1]
    token_mean = float(aggregate_loss(loss, mask, "token_mean"))
    assert float(aggregate_loss(loss, mask, "seq_mean_token_mean")) == pytest.approx(token_mean, abs=1e-9)
    assert float(aggregate_loss(loss, mask, "seq_mean_token_sum_norm", norm_tokens=t)) == pytest.approx(
        token_mean, abs=1e-9
    )
    assert float(aggregate_loss(loss, mask, "seq_mean_token_sum")) == pytest.approx(t * token_mean, abs=1e-9)


@_PROPERTY
@given(_batch(), st.sampled_from(AGGREGATION_MODES))
def test_masked_tokens_get_zero_gradient_even_with_a_nonfinite_loss(
    batch: tuple[torch.Tensor, torch.Tensor], mode: str
) -> None:
    loss, mask = batch
    loss = loss.masked_fill(mask == 0, math.inf).requires_grad_()
    total = aggregate_loss(loss, mask, mode, norm_tokens=7)
    total.backward()
    assert loss.grad is not None
    assert math.isfinite(float(total.detach()))
    assert bool((loss.grad[mask == 0] == 0).all())
    assert bool((loss.grad[mask > 0] > 0).all())  # every action token counts, with a positive weight


@_PROPERTY
@given(_batch(), st.sampled_from(AGGREGATION_MODES))
def test_aggregate_is_the_scaled_sum_and_linear_in_the_loss(
    batch: tuple[torch.Tensor, torch.Tensor], mode: str
) -> None:
    loss, mask = batch
    scales = torch.stack(token_scales(list(mask), mode, norm_tokens=7))
    assert float(aggregate_loss(loss, mask, mode, 7)) == pytest.approx(float((scales * loss).sum()), abs=1e-9)
    assert float(aggregate_loss(2 * loss + 1, mask, mode, 7)) == pytest.approx(
        2 * float(aggregate_loss(loss, mask, mode, 7)) + float(aggregate_loss(torch.ones_like(loss), mask, mode, 7)),
        abs=1e-9,
    )
    if mode == "token_mean":
        assert float(scales.sum()) == pytest.approx(1.0)
    if mode == "seq_mean_token_mean":
        assert float(scales.sum()) == pytest.approx(1.0)  # each sequence weighs 1/B in all


def _verl_agg_loss(
    loss_mat: torch.Tensor, loss_mask: torch.Tensor, mode: str, loss_scale_factor: float
) -> torch.Tensor:
    """verl core_algos.agg_loss (single process: dp_size 1, global counts from the micro-batch):
    token-mean = masked_sum / mask.sum(); seq-mean-token-sum = masked_sum over sequences with a
    token / their count; seq-mean-token-mean = the same over per-sequence token means;
    seq-mean-token-sum-norm = sum of sequence sums / loss_scale_factor."""
    seq_mask = (loss_mask.sum(-1) > 0).double()
    if mode == "token-mean":
        return (loss_mat * loss_mask).sum() / loss_mask.sum()
    if mode == "seq-mean-token-sum":
        return ((loss_mat * loss_mask).sum(-1) * seq_mask).sum() / seq_mask.sum()
    if mode == "seq-mean-token-mean":
        seq_losses = (loss_mat * loss_mask).sum(-1) / (loss_mask.sum(-1) + 1e-8)
        return (seq_losses * seq_mask).sum() / seq_mask.sum()
    return (loss_mat * loss_mask).sum(-1).sum() / loss_scale_factor


def _trl_loss(
    per_token_loss: torch.Tensor, mask: torch.Tensor, loss_type: str, max_completion_length: int
) -> torch.Tensor:
    """TRL GRPOTrainer._compute_loss: grpo = mean over sequences of the per-sequence token mean;
    bnpo = token mean over the batch; dr_grpo = sum / (batch size * max_completion_length)."""
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    return (per_token_loss * mask).sum() / (per_token_loss.size(0) * max_completion_length)


@_PROPERTY
@given(_batch())
def test_modes_match_verl_agg_loss_and_trl_loss_types(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Rows all have a token here, so verl's and TRL's sequence counts are B; Dr. GRPO's constant
    normaliser is TRL's `B * max_completion_length` and verl's `loss_scale_factor` set to it."""
    loss, mask = batch
    b, t = loss.shape
    ours: dict[str, float] = {
        mode: float(aggregate_loss(loss, mask, mode, norm_tokens=t)) for mode in AGGREGATION_MODES
    }
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        expected = float(_verl_agg_loss(loss, mask, mode, loss_scale_factor=b * t))
        assert ours[mode.replace("-", "_")] == pytest.approx(expected, rel=1e-6, abs=1e-9), mode
    assert ours["seq_mean_token_mean"] == pytest.approx(float(_trl_loss(loss, mask, "grpo", t)), abs=1e-9)
    assert ours["token_mean"] == pytest.approx(float(_trl_loss(loss, mask, "bnpo", t)), abs=1e-9)
    assert ours["seq_mean_token_sum_norm"] == pytest.approx(float(_trl_loss(loss, mask, "dr_grpo", t)), abs=1e-9)


def test_bad_modes_are_errors() -> None:
    with pytest.raises(InvalidInputError, match="unknown loss aggregation 'seq_mean'"):
        aggregate_loss(_LOSS, _MASK, "seq_mean")
    with pytest.raises(InvalidInputError, match="needs a positive constant norm_tokens"):
        aggregate_loss(_LOSS, _MASK, "seq_mean_token_sum_norm")
    with pytest.raises(InvalidInputError, match=r"needs \[B, T\]"):
        aggregate_loss(_LOSS[0], _MASK[0], "token_mean")


# -- folding into datums ---------------------------------------------------------------------------


def _rl_datum(lp_q_adv_mask: list[tuple[float, float, float, float]]) -> Datum:
    n = len(lp_q_adv_mask)
    return Datum(
        ModelInput.from_ints(list(range(n))),
        {
            "target_tokens": TensorData.from_list(list(range(1, n + 1)), "int64"),
            "logprobs": TensorData.from_list([q for _, q, _, _ in lp_q_adv_mask], "float32"),
            "advantages": TensorData.from_list([a * m for _, _, a, m in lp_q_adv_mask], "float32"),
            "mask": TensorData.from_list([m for *_, m in lp_q_adv_mask], "float32"),
            "weights": TensorData.from_list([m for *_, m in lp_q_adv_mask], "float32"),
        },
    )


_TOKEN = st.tuples(st.floats(-3, 0), st.floats(-3, 0), st.floats(-2, 2), st.sampled_from([0.0, 1.0, 1.0]))


@_PROPERTY
@given(
    st.lists(st.lists(_TOKEN, min_size=1, max_size=5), min_size=1, max_size=4),
    st.sampled_from(AGGREGATION_MODES),
    st.sampled_from(["cross_entropy", "importance_sampling", "ppo", "cispo", "gspo"]),
)
def test_folded_datums_give_the_aggregated_loss_and_gradient(
    tokens_D: list[list[tuple[float, float, float, float]]], mode: str, loss_fn: str
) -> None:
    """The built-in (summing) loss on folded datums == aggregate_loss of its per-token losses,
    value and gradient."""
    data = [_rl_datum(tokens) for tokens in tokens_D]
    spec = get_loss_fn(loss_fn)
    keys = {"cross_entropy": ("weights",), "gspo": ("logprobs", "advantages", "mask")}.get(
        loss_fn, ("logprobs", "advantages")
    )
    width = max(len(t) for t in tokens_D)

    def inputs(datum: Datum) -> dict[str, torch.Tensor]:
        tensors = {key: datum.loss_fn_inputs[key].to_torch().double() for key in keys}
        if "mask" in tensors:
            tensors["sequence_ratio_mask"] = tensors.pop("mask")
        return tensors

    lp_plain = [torch.tensor([lp for lp, *_ in t], dtype=torch.float64, requires_grad=True) for t in tokens_D]
    rows = [
        torch.nn.functional.pad(spec.token_losses(lp, inputs(d)), (0, width - len(lp)))
        for lp, d in zip(lp_plain, data, strict=True)
    ]
    masks = torch.stack(
        [
            torch.nn.functional.pad(
                d.loss_fn_inputs["mask"].to_torch().double(), (0, width - len(d.loss_fn_inputs["mask"].tolist()))
            )
            for d in data
        ]
    )
    expected = aggregate_loss(torch.stack(rows), masks, mode, norm_tokens=6)
    expected.backward()

    folded = fold_aggregation(data, loss_fn, mode, norm_tokens=6)
    lp_fold = [torch.tensor([lp for lp, *_ in t], dtype=torch.float64, requires_grad=True) for t in tokens_D]
    total = sum(
        (spec(lp, inputs(d))[0] for lp, d in zip(lp_fold, folded, strict=True)), torch.zeros((), dtype=torch.float64)
    )
    total.backward()
    assert float(total.detach()) == pytest.approx(float(expected.detach()), rel=1e-5, abs=1e-6)
    for a, b in zip(lp_fold, lp_plain, strict=True):
        assert a.grad is not None and b.grad is not None
        assert a.grad.tolist() == pytest.approx(b.grad.tolist(), rel=1e-5, abs=1e-6)


def test_fold_leaves_token_sum_alone_and_refuses_a_loss_it_cannot_scale() -> None:
    data = [_rl_datum([(-1.0, -1.0, 1.0, 1.0), (-1.0, -1.0, -1.0, 1.0)])]
    assert fold_aggregation(data, "dro", "token_sum") == data
    with pytest.raises(InvalidInputError, match="loss 'dro' has no input that scales"):
        fold_aggregation(data, "dro", "token_mean")
    (folded,) = fold_aggregation(data, "ppo", "token_mean")
    assert folded.loss_fn_inputs["advantages"].tolist() == [0.5, -0.5]
    assert folded.loss_fn_inputs["mask"].tolist() == [1.0, 1.0]


@_PROPERTY
@given(
    st.sampled_from(["cross_entropy", "importance_sampling", "ppo", "cispo", "gspo", "decoupled_ppo"]),
    st.floats(0.0, 5.0),
)
def test_scaled_by_input_scales_every_token_loss_linearly(loss_fn: str, factor: float) -> None:
    """What folding relies on: multiplying a loss's `scaled_by` input by w >= 0 multiplies each
    token's loss by w (ppo's dual clip on, so that branch is covered too)."""
    spec = get_loss_fn(loss_fn)
    assert spec.scaled_by is not None
    lp = torch.tensor([-1.0, -0.2, -3.0, -0.5], dtype=torch.float64)
    inputs = {
        "weights": torch.tensor([1.0, 0.5, 0.0, 2.0], dtype=torch.float64),
        "logprobs": torch.tensor([-1.5, -0.1, -0.2, -0.5], dtype=torch.float64),
        "proximal_logprobs": torch.tensor([-1.4, -0.3, -0.2, -0.6], dtype=torch.float64),
        "advantages": torch.tensor([1.0, -1.0, -2.0, 0.5], dtype=torch.float64),
        "sequence_ratio_mask": torch.tensor([1.0, 1.0, 0.0, 1.0], dtype=torch.float64),
    }
    config = {"clip_ratio_c": 2.0} if loss_fn in ("ppo", "decoupled_ppo") else None
    scaled = {**inputs, spec.scaled_by: inputs[spec.scaled_by] * factor}
    base = spec.token_losses(lp, inputs, config)
    assert spec.token_losses(lp, scaled, config).tolist() == pytest.approx((factor * base).tolist(), abs=1e-12)
