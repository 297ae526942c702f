"""KL estimators k1/k2/k3 and their straight-through variants: hand-worked values, properties,
and a cross-check against verl's `kl_penalty` on the same tensors."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from train_core.errors import InvalidInputError
from train_core.rl.kl_estimators import KL_ESTIMATOR_ALIASES, KL_ESTIMATORS, kl_estimate, kl_estimator_name

_PROPERTY = settings(max_examples=30, deadline=None)
"""Property tests here run 30 examples with no deadline (the suite's time budget; a busy machine)."""

_PAIRS = st.integers(1, 10).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(-8, 0), min_size=n, max_size=n), st.lists(st.floats(-8, 0), min_size=n, max_size=n)
    )
)


def _value_and_grad(estimator: str, lp: list[float], ref: list[float]) -> tuple[list[float], list[float]]:
    lp_T = torch.tensor(lp, dtype=torch.float64, requires_grad=True)
    value = kl_estimate(lp_T, torch.tensor(ref, dtype=torch.float64), estimator)
    value.sum().backward()
    assert lp_T.grad is not None
    return value.detach().tolist(), lp_T.grad.tolist()


def test_hand_worked_values_and_gradients() -> None:
    """lp = -1, ref = -2: d = ref - lp = -1."""
    assert _value_and_grad("k1", [-1.0], [-2.0]) == ([1.0], [1.0])
    assert _value_and_grad("k2", [-1.0], [-2.0]) == ([0.5], [1.0])
    k3, k3_grad = _value_and_grad("k3", [-1.0], [-2.0])
    assert k3 == pytest.approx([math.exp(-1) + 1 - 1]) and k3_grad == pytest.approx([1 - math.exp(-1)])
    for plus in ("k1+", "k3+"):  # the base's value, k2's gradient (lp - ref = 1)
        value, grad = _value_and_grad(plus, [-1.0], [-2.0])
        assert value == pytest.approx(_value_and_grad(plus[:-1], [-1.0], [-2.0])[0]) and grad == pytest.approx([1.0])


@_PROPERTY
@given(_PAIRS)
def test_properties(pair: tuple[list[float], list[float]]) -> None:
    lp, ref = pair
    k3, k3_grad = _value_and_grad("k3", lp, ref)
    assert all(v >= 0 for v in k3)  # always non-negative
    for x, r, k3_value, grad in zip(lp, ref, k3, k3_grad, strict=True):
        # d(exp(d) - d - 1)/d(lp) = 1 - exp(d) below the clamp; flat where the value is clamped at 10
        assert grad == pytest.approx(1 - math.exp(r - x) if k3_value < 10 else 0.0, abs=1e-9)
    k2, k2_grad = _value_and_grad("k2", lp, ref)
    assert all(v >= 0 for v in k2)
    for estimator in ("k1", "k3"):
        value, _ = _value_and_grad(estimator, lp, ref)
        plus_value, plus_grad = _value_and_grad(estimator + "+", lp, ref)
        assert plus_value == pytest.approx(value, abs=1e-12)
        assert plus_grad == pytest.approx(k2_grad, abs=1e-12)
    same, same_grad = _value_and_grad("k3", lp, lp)  # policy == reference: zero, and flat
    assert same == [0.0] * len(lp) and same_grad == [0.0] * len(lp)


def _verl_kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """verl core_algos.kl_penalty / kl_penalty_forward: kl|k1 = lp - ref; mse|k2 = (lp - ref)^2 / 2;
    low_var_kl|k3 = exp(d) - d - 1 with d = clamp(ref - lp, -20, 20), clamped to [-10, 10]; a name
    ending in "+" keeps the value and takes k2's gradient (backward - backward.detach() +
    forward.detach())."""
    base = kl_penalty.removesuffix("+")
    if base in ("kl", "k1"):
        forward = logprob - ref_logprob
    elif base in ("mse", "k2"):
        forward = 0.5 * (logprob - ref_logprob).square()
    else:
        kl = torch.clamp(ref_logprob - logprob, min=-20, max=20)
        forward = torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)
    if not kl_penalty.endswith("+") or base in ("mse", "k2"):
        return forward
    backward = 0.5 * (logprob - ref_logprob).square()
    return backward - backward.detach() + forward.detach()


@_PROPERTY
@given(_PAIRS, st.sampled_from(["kl", "k1", "mse", "k2", "low_var_kl", "k3", "k1+", "k3+", "low_var_kl+"]))
def test_matches_verl_value_and_gradient(pair: tuple[list[float], list[float]], verl_name: str) -> None:
    lp, ref = pair
    ours, our_grad = _value_and_grad(verl_name, lp, ref)  # verl's names are accepted as they are
    lp_T = torch.tensor(lp, dtype=torch.float64, requires_grad=True)
    theirs = _verl_kl_penalty(lp_T, torch.tensor(ref, dtype=torch.float64), verl_name)
    theirs.sum().backward()
    assert lp_T.grad is not None
    assert ours == pytest.approx(theirs.detach().tolist(), abs=1e-12)
    assert our_grad == pytest.approx(lp_T.grad.tolist(), abs=1e-12)


def test_k3_is_bounded_where_the_reference_finds_a_token_impossible() -> None:
    """d = ref - lp = -999.9 is clamped to -20 and the value (19) to 10: finite, and flat there."""
    value, grad = _value_and_grad("k3", [-0.1], [-1000.0])
    assert value == [10.0] and grad == [0.0]


def test_names() -> None:
    assert KL_ESTIMATORS == ("k1", "k2", "k3", "k1+", "k3+")
    assert {alias: kl_estimator_name(alias) for alias in KL_ESTIMATOR_ALIASES} == KL_ESTIMATOR_ALIASES
    with pytest.raises(InvalidInputError, match=r"unknown KL estimator 'k4'.*low_var_kl"):
        kl_estimator_name("k4")
