"""XPO's loss (`train_core.preference.xpo`) against a closed-form oracle of TRL's
`XPOTrainer._compute_losses` (TRL 1.9; TRL 1.16, the test extra, no longer ships XPO, so
`benchmarks/xpo_vs_trl.py` runs TRL's own method beside an install of 1.9: 0 difference in value
and gradient). The oracle computes each pair by hand in Python floats, and the gradient from
the derivative of each term, so it shares no code with the implementation."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from train_core.preference.xpo import make_xpo_custom_loss, xpo_loss
from train_core.supervised import datum_from_tokens_weights

SEEDS = (0, 1, 2, 3)


def _oracle(
    lp_y: list[float], lp_yt: list[float], ref_y: list[float], ref_yt: list[float], chosen: list[bool],
    beta: float, alpha: float, loss_type: str,
) -> tuple[float, list[float], list[float]]:  # fmt: skip
    """(loss, d loss / d log pi(y), d loss / d log pi(y~)) per pair, by hand."""
    pairs = len(lp_y)
    total, grad_y, grad_yt = 0.0, [], []
    for i in range(pairs):
        ratio_y, ratio_yt = lp_y[i] - ref_y[i], lp_yt[i] - ref_yt[i]
        logits = ratio_y - ratio_yt if chosen[i] else ratio_yt - ratio_y
        if loss_type == "sigmoid":
            z = beta * logits
            term = math.log1p(math.exp(-z)) if z > 0 else -z + math.log1p(math.exp(z))
            d_logits = -beta * (math.exp(-z) / (1 + math.exp(-z)) if z > 0 else 1 / (1 + math.exp(z)))
        else:
            term = (logits - 1 / (2 * beta)) ** 2
            d_logits = 2 * (logits - 1 / (2 * beta))
        total += term + alpha * lp_yt[i]
        sign = 1.0 if chosen[i] else -1.0
        grad_y.append(sign * d_logits / pairs)
        grad_yt.append((-sign * d_logits + alpha) / pairs)
    return total / pairs, grad_y, grad_yt


def _random(seed: int, pairs: int = 6) -> tuple[list[torch.Tensor], torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    sums = [-torch.rand(pairs, generator=generator, dtype=torch.float64) * 20 for _ in range(4)]
    chosen = torch.rand(pairs, generator=generator) < 0.5
    return sums, chosen


def _check(sums: list[torch.Tensor], chosen: torch.Tensor, beta: float, alpha: float, loss_type: str) -> None:
    lp_y, lp_yt = (t.clone().requires_grad_(True) for t in sums[:2])
    loss, dpo_P, exploration_P = xpo_loss(lp_y, lp_yt, sums[2], sums[3], chosen, beta, alpha, loss_type)
    loss.backward()
    lists = [t.tolist() for t in sums]
    want, grad_y, grad_yt = _oracle(lists[0], lists[1], lists[2], lists[3], chosen.tolist(), beta, alpha, loss_type)
    assert abs(loss.item() - want) <= 1e-12 * max(1.0, abs(want))
    assert torch.allclose(exploration_P, alpha * sums[1], rtol=0, atol=1e-15)
    assert lp_y.grad is not None and lp_yt.grad is not None
    assert (lp_y.grad - torch.tensor(grad_y, dtype=torch.float64)).abs().max() <= 1e-12
    assert (lp_yt.grad - torch.tensor(grad_yt, dtype=torch.float64)).abs().max() <= 1e-12
    assert torch.isclose(loss, (dpo_P + exploration_P).mean(), rtol=0, atol=1e-15)


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
@pytest.mark.parametrize("seed", SEEDS)
def test_xpo_equals_trls_formula_on_random_batches(seed: int, loss_type: str) -> None:
    sums, chosen = _random(seed)
    _check(sums, chosen, beta=0.05 + 0.1 * seed, alpha=1e-3 * (seed + 1), loss_type=loss_type)


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_xpo_edge_cases(loss_type: str) -> None:
    """The policy equal to the reference (every log-ratio 0: sigmoid's term is ln 2), identical
    completions, huge margins (logsigmoid stays finite), alpha 0 (plain online DPO)."""
    zeros = torch.zeros(3, dtype=torch.float64)
    equal = [torch.tensor([-5.0, -1.0, -30.0], dtype=torch.float64)] * 4
    _check(equal, torch.tensor([True, False, True]), 0.1, 1e-2, loss_type)
    loss, dpo_P, _ = xpo_loss(equal[0], equal[1], equal[2], equal[3], torch.tensor([True, False, True]), 0.1, 0.0)
    assert torch.allclose(dpo_P, torch.full_like(dpo_P, math.log(2))) and loss.item() == pytest.approx(math.log(2))
    near, far_away = torch.tensor([-1.0], dtype=torch.float64), torch.tensor([-5000.0], dtype=torch.float64)
    far = [near, far_away, zeros[:1], zeros[:1]]
    _check(far, torch.tensor([True]), 0.5, 0.0, loss_type)
    _check(far, torch.tensor([False]), 0.5, 0.0, loss_type)


def test_a_tie_counts_the_policys_completion_as_chosen() -> None:
    """TRL labels with `model_scores >= ref_scores`: the caller passes True for a tie, and the
    loss then raises the policy's completion over the reference's."""
    sums = [torch.tensor([-4.0], dtype=torch.float64, requires_grad=True)] + [
        torch.tensor([-4.0], dtype=torch.float64) for _ in range(3)
    ]
    loss, _, _ = xpo_loss(sums[0], sums[1], sums[2], sums[3], torch.tensor([True]), 0.1, 0.0)
    loss.backward()
    assert sums[0].grad is not None and sums[0].grad.item() < 0  # descending the loss raises log pi(y)


def test_bad_inputs_are_refused() -> None:
    one = torch.zeros(2)
    with pytest.raises(ValueError, match="XPO has sigmoid and ipo"):
        xpo_loss(one, one, one, one, one.bool(), 0.1, 0.0, "hinge")
    with pytest.raises(ValueError, match="one non-empty shape"):
        xpo_loss(one, torch.zeros(3), one, one, one.bool(), 0.1, 0.0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(*(st.floats(-200, 0) for _ in range(4)), st.booleans()), min_size=1, max_size=8),
    st.floats(0.01, 2.0),
    st.floats(0.0, 1.0),
    st.sampled_from(["sigmoid", "ipo"]),
)
def test_xpo_property_matches_the_oracle(
    rows: list[tuple[float, float, float, float, bool]], beta: float, alpha: float, loss_type: str
) -> None:
    sums = [torch.tensor([row[k] for row in rows], dtype=torch.float64) for k in range(4)]
    _check(sums, torch.tensor([row[4] for row in rows]), beta, alpha, loss_type)


def test_the_custom_loss_sums_completion_tokens_of_interleaved_data() -> None:
    """`make_xpo_custom_loss` on `[y, y~]` datums: prompt tokens (weight 0) do not count, and the
    result equals `xpo_loss` on the completions' sums."""
    generator = torch.Generator().manual_seed(7)
    data, policy_D, reference_D = [], [], []
    for prompt, completion in ((2, 3), (2, 5), (3, 1), (3, 4)):
        data.append(datum_from_tokens_weights([1] * (prompt + completion), [0.0] * prompt + [1.0] * completion))
        policy_D.append(-torch.rand(prompt + completion - 1, generator=generator, dtype=torch.float64))
        reference_D.append(-torch.rand(prompt + completion - 1, generator=generator, dtype=torch.float64))
    loss_fn = make_xpo_custom_loss(reference_D, [True, False], 0.2, 0.05)
    loss, metrics = loss_fn(data, policy_D)

    def sums(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        weights = [d.loss_fn_inputs["weights"].to_torch().double() for d in data]
        return [torch.stack([(t * w).sum() for t, w in zip(tensors[k::2], weights[k::2], strict=True)]) for k in (0, 1)]

    (lp_y, lp_yt), (ref_y, ref_yt) = sums(policy_D), sums(reference_D)
    want, _, _ = xpo_loss(lp_y, lp_yt, ref_y, ref_yt, torch.tensor([True, False]), 0.2, 0.05)
    assert loss.item() == pytest.approx(want.item(), abs=1e-12)
    assert metrics["xpo/policy_chosen"] == 0.5 and metrics["num_tokens"] == 13
    with pytest.raises(ValueError, match="two data per verdict"):
        make_xpo_custom_loss(reference_D, [True], 0.2, 0.05)(data, policy_D)
