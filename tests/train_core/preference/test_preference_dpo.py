"""dpo_loss, its metrics, the per-token -> sequence helper, and the custom loss for forward_backward_custom."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from train_core.preference.datums import preference_datums
from train_core.preference.dpo import dpo_loss, make_dpo_custom_loss, pair_sequence_logprobs
from train_core.preference.losses import PreferenceLossParams, PreferenceObjective
from train_core.preference.types import Comparison, LabeledComparison
from train_core.renderers.base import Message, Renderer

DPO_01 = PreferenceObjective(params=PreferenceLossParams(beta=0.1))

LN2 = math.log(2.0)


def _t(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_dpo_loss_matches_hand_computed_values() -> None:
    # c = lp_chosen - ref = [1, 0]; r = lp_rejected - ref = [-1, 1]; beta = 0.5
    # beta * (c - r) = [1, -0.5]; -logsigmoid(x) = log(1 + exp(-x))
    loss, metrics = dpo_loss(_t([-1.0, -2.0]), _t([-3.0, -1.0]), _t([-2.0, -2.0]), _t([-2.0, -2.0]), beta=0.5)
    expected_loss = (math.log(1 + math.exp(-1.0)) + math.log(1 + math.exp(0.5))) / 2
    assert loss.item() == pytest.approx(expected_loss, abs=1e-12)
    assert metrics == pytest.approx(
        {
            "dpo_loss": expected_loss,
            "accuracy": 0.5,  # pair 0: 1 > -1; pair 1: 0 < 1
            "margin": (0.5 * 2 + 0.5 * -1) / 2,
            "chosen_reward": (0.5 * 1 + 0.5 * 0) / 2,
            "rejected_reward": (0.5 * -1 + 0.5 * 1) / 2,
            "num_pairs": 2.0,
        }
    )


_logprob = st.floats(min_value=-40.0, max_value=0.0, allow_nan=False)


@st.composite
def _pairs(draw: st.DrawFn) -> tuple[list[float], list[float], list[float], list[float], float]:
    n = draw(st.integers(min_value=1, max_value=8))
    columns = [draw(st.lists(_logprob, min_size=n, max_size=n)) for _ in range(4)]
    beta = draw(st.floats(min_value=0.01, max_value=2.0))
    return columns[0], columns[1], columns[2], columns[3], beta


@settings(max_examples=200, deadline=None)
@given(_pairs())
def test_dpo_loss_and_metrics_match_direct_torch_formula(
    pairs: tuple[list[float], list[float], list[float], list[float], float],
) -> None:
    chosen, rejected, chosen_ref, rejected_ref, beta = pairs
    loss, metrics = dpo_loss(_t(chosen), _t(rejected), _t(chosen_ref), _t(rejected_ref), beta)

    c = _t(chosen) - _t(chosen_ref)
    r = _t(rejected) - _t(rejected_ref)
    direct_loss = torch.log1p(torch.exp(-beta * (c - r))).mean().item()
    assert loss.item() == pytest.approx(direct_loss, rel=1e-9, abs=1e-9)
    assert metrics["dpo_loss"] == pytest.approx(direct_loss, rel=1e-9, abs=1e-9)
    sums = zip(chosen, rejected, chosen_ref, rejected_ref, strict=True)
    resolution = [2.0**-23 * sum(map(abs, four)) for four in sums]
    wins = sum(ci - ri > res for ci, ri, res in zip(c, r, resolution, strict=True))
    assert metrics["accuracy"] == pytest.approx(wins / len(c))
    assert metrics["margin"] == pytest.approx((beta * c - beta * r).mean().item(), abs=1e-9)
    assert metrics["chosen_reward"] == pytest.approx((beta * c).mean().item(), abs=1e-9)
    assert metrics["rejected_reward"] == pytest.approx((beta * r).mean().item(), abs=1e-9)
    assert metrics["num_pairs"] == len(chosen)


@settings(max_examples=50, deadline=None)
@given(st.lists(_logprob, min_size=2, max_size=8), st.floats(min_value=0.01, max_value=5.0))
def test_loss_is_ln2_when_policy_equals_reference(logprobs: list[float], beta: float) -> None:
    half = len(logprobs) // 2
    chosen = torch.tensor(logprobs[:half], dtype=torch.float32)
    rejected = torch.tensor(logprobs[half : 2 * half], dtype=torch.float32)
    loss, metrics = dpo_loss(chosen, rejected, chosen.clone(), rejected.clone(), beta)
    assert abs(loss.item() - LN2) < 1e-6
    assert metrics["accuracy"] == 0.0
    assert metrics["margin"] == 0.0


def test_a_margin_within_float32_rounding_is_a_tie_not_a_win() -> None:
    """The same tokens scored in batches of different shapes differ by an ulp per token logprob
    (kitchen serve batches a reference's requests otherwise than the in-process backend): such
    a margin is not a preference, so step 0's accuracy is 0 however the batches fell. A margin
    above that rounding counts."""
    policy = torch.tensor([-280.0, -150.0, -90.0, -300.0], dtype=torch.float32)
    reference = policy.clone()
    reference[0::2] = torch.nextafter(policy[0::2], torch.tensor(0.0))  # the chosen ones' ref, one ulp up
    _, tied = dpo_loss(policy[0::2], policy[1::2], reference[0::2] - 3e-5, reference[1::2], beta=0.1)
    assert tied["margin"] > 0 and tied["accuracy"] == 0.0
    _, won = dpo_loss(policy[0::2] + 1e-2, policy[1::2], reference[0::2], reference[1::2], beta=0.1)
    assert won["accuracy"] == 1.0


def test_raising_chosen_logprob_lowers_the_loss_and_raising_rejected_raises_it() -> None:
    chosen = _t([-5.0, -3.0]).requires_grad_()
    rejected = _t([-4.0, -6.0]).requires_grad_()
    ref = _t([-4.0, -4.0])
    loss, _ = dpo_loss(chosen, rejected, ref, ref, beta=0.1)
    loss.backward()
    assert chosen.grad is not None and rejected.grad is not None
    assert (chosen.grad < 0).all()
    assert (rejected.grad > 0).all()
    # and a finite step in that direction really lowers the loss
    stepped, _ = dpo_loss(chosen.detach() + 0.5, rejected.detach(), ref, ref, beta=0.1)
    assert stepped.item() < loss.item()


def test_dpo_loss_rejects_mismatched_or_empty_inputs() -> None:
    with pytest.raises(ValueError, match="shape"):
        dpo_loss(_t([0.0, 1.0]), _t([0.0]), _t([0.0]), _t([0.0]), 0.1)
    with pytest.raises(ValueError, match="at least one pair"):
        dpo_loss(_t([]), _t([]), _t([]), _t([]), 0.1)


def test_pair_sequence_logprobs_sums_weighted_tokens_of_interleaved_data() -> None:
    logprobs_D = [_t([-1.0, -2.0, -3.0]), _t([-4.0, -5.0]), _t([-0.5, -0.25]), _t([-7.0])]
    weights_D = [_t([0.0, 1.0, 1.0]), _t([1.0, 0.0]), _t([1.0, 1.0]), _t([0.0])]
    chosen_P, rejected_P = pair_sequence_logprobs(logprobs_D, weights_D)
    assert chosen_P.tolist() == [-5.0, -0.75]
    assert rejected_P.tolist() == [-4.0, 0.0]


def test_pair_sequence_logprobs_rejects_bad_layouts() -> None:
    with pytest.raises(ValueError, match="even"):
        pair_sequence_logprobs([_t([-1.0])], [_t([1.0])])
    with pytest.raises(ValueError, match="datum 1"):
        pair_sequence_logprobs([_t([-1.0]), _t([-1.0, -2.0])], [_t([1.0]), _t([1.0])])
    with pytest.raises(ValueError, match="weight tensors"):
        pair_sequence_logprobs([_t([-1.0]), _t([-1.0])], [_t([1.0])])


def _labeled(question: str, good: str, bad: str) -> LabeledComparison:
    prompt = [Message(role="user", content=question)]
    return LabeledComparison(
        Comparison(prompt, [Message(role="assistant", content=good)], [Message(role="assistant", content=bad)]), "A"
    )


def test_custom_loss_on_real_datums_matches_dpo_loss_and_only_trains_completions(role_colon: Renderer) -> None:
    data = preference_datums(
        [
            _labeled("What is 2 + 3?", "The answer is 5. Thank you!", "The answer is 6. Go away."),
            _labeled("Which is larger, 4 or 9?", "The answer is 9.", "The answer is 4. Whatever."),
        ],
        role_colon,
        max_length=64,
    )
    generator = torch.Generator().manual_seed(0)
    lengths = [len(d.loss_fn_inputs["target_tokens"].data) for d in data]
    policy_D = [(-torch.rand(n, generator=generator) * 5).requires_grad_() for n in lengths]
    ref_D = [-torch.rand(n, generator=generator) * 5 for n in lengths]
    weights_D = [d.loss_fn_inputs["weights"].to_torch() for d in data]

    loss, metrics = make_dpo_custom_loss(ref_D, DPO_01)(data, policy_D)
    loss.backward()

    def seq(values: torch.Tensor, weights: torch.Tensor) -> float:
        return float((values.detach() * weights).sum())

    expected_loss, expected_metrics = dpo_loss(
        torch.tensor([seq(policy_D[0], weights_D[0]), seq(policy_D[2], weights_D[2])]),
        torch.tensor([seq(policy_D[1], weights_D[1]), seq(policy_D[3], weights_D[3])]),
        torch.tensor([seq(ref_D[0], weights_D[0]), seq(ref_D[2], weights_D[2])]),
        torch.tensor([seq(ref_D[1], weights_D[1]), seq(ref_D[3], weights_D[3])]),
        0.1,
    )
    assert loss.item() == pytest.approx(expected_loss.item(), abs=1e-6)
    for key, value in expected_metrics.items():
        assert metrics[key] == pytest.approx(value, abs=1e-6)
    assert metrics["num_tokens"] == sum(float(w.sum()) for w in weights_D)
    for logprobs, weights in zip(policy_D, weights_D, strict=True):
        assert logprobs.grad is not None
        assert (logprobs.grad[weights == 0] == 0).all()  # prompt tokens get no gradient
        assert (logprobs.grad[weights > 0] != 0).all()


def test_custom_loss_is_ln2_at_step_one(role_colon: Renderer) -> None:
    data = preference_datums(
        [_labeled("What is 1 + 1?", "The answer is 2. Thank you!", "The answer is 3. Who cares?")],
        role_colon,
        max_length=None,
    )
    generator = torch.Generator().manual_seed(1)
    logprobs_D = [-torch.rand(len(d.loss_fn_inputs["target_tokens"].data), generator=generator) for d in data]
    loss, metrics = make_dpo_custom_loss([lp.clone() for lp in logprobs_D], DPO_01)(data, logprobs_D)
    assert abs(loss.item() - LN2) < 1e-6
    assert abs(metrics["dpo_loss"] - LN2) < 1e-6


def test_custom_loss_rejects_a_reference_of_the_wrong_size(role_colon: Renderer) -> None:
    data = preference_datums([_labeled("Hi?", "Hello.", "Go away.")], role_colon, max_length=None)
    logprobs_D = [torch.zeros(len(d.loss_fn_inputs["target_tokens"].data)) for d in data]
    with pytest.raises(ValueError, match="reference"):
        make_dpo_custom_loss(logprobs_D[:1], DPO_01)(data, logprobs_D)
