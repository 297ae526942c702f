"""`alphapo` against TRL 1.16's own computation: `CPOTrainer.cpo_loss` with `alpha != 0` and
`loss_type="simpo"` (what `CPOConfig(loss_type="alphapo")` turns into), on the length-averaged
logprobs its `concatenated_forward` passes for simpo; value and gradient with respect to the
per-token logprobs, float64, several seeds and the edge cases. TRL is in the test extra: imported,
never skipped."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trl.experimental.cpo.cpo_trainer import CPOTrainer

from tests.rlhf.trl_dpo_harness import DPOCase, random_case
from train_core.preference.losses import PairBatch, PreferenceLossParams, alphapo_reward, preference_loss

pytestmark = pytest.mark.slow  # importing TRL takes 10-50 s on 2 cores

CPO: Any = CPOTrainer  # its loss method runs on a stand-in trainer (the module doc)
LENGTHS = (3, 8, 5, 6, 2, 7, 8, 4)  # 4 pairs: chosen rows, then rejected rows
TOLERANCE = 1e-12


def _sums(case: DPOCase, policy_RT: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    shift = case.mask_RL[:, 1:].double()
    return (policy_RT * shift).sum(1), case.mask_RL.sum(1).double()


def _ours(case: DPOCase, policy_RT: torch.Tensor, params: PreferenceLossParams) -> torch.Tensor:
    sums, lengths = _sums(case, policy_RT)
    p, zero = case.pairs, torch.zeros(case.pairs, dtype=torch.float64)
    return preference_loss("alphapo", PairBatch(sums[:p], sums[p:], zero, zero, lengths[:p], lengths[p:]), params)[0]


def _theirs(case: DPOCase, policy_RT: torch.Tensor, params: PreferenceLossParams) -> torch.Tensor:
    sums, lengths = _sums(case, policy_RT)
    average = sums / lengths  # CPO's simpo scores (average_log_prob)
    trainer = SimpleNamespace(
        alpha=params.alphapo_alpha,
        beta=params.beta,
        label_smoothing=params.label_smoothing,
        loss_type="simpo",
        simpo_gamma=params.simpo_gamma,
        accelerator=SimpleNamespace(device="cpu"),
    )
    losses, _, _ = CPO.cpo_loss(trainer, average[: case.pairs], average[case.pairs :])
    return losses.mean()  # get_batch_loss_metrics, with alphapo's cpo_alpha = 0


def _diffs(case: DPOCase, params: PreferenceLossParams) -> tuple[float, float, torch.Tensor]:
    """|value diff| and max |gradient diff|, each relative to its size where that is above 1
    (`p^(-alpha)` grows as `exp(alpha * 7)` at a mean logprob of -7), and kitchen's gradient."""
    ours_RT = case.policy_RT.clone().requires_grad_(True)
    theirs_RT = case.policy_RT.clone().requires_grad_(True)
    ours, theirs = _ours(case, ours_RT, params), _theirs(case, theirs_RT, params)
    ours.backward()
    theirs.backward()
    assert ours_RT.grad is not None and theirs_RT.grad is not None
    assert torch.isfinite(ours)
    value_scale, grad_scale = max(1.0, float(theirs.detach().abs())), max(1.0, float(theirs_RT.grad.abs().max()))
    value_diff = float((ours - theirs).detach().abs()) / value_scale
    return value_diff, float((ours_RT.grad - theirs_RT.grad).abs().max()) / grad_scale, ours_RT.grad


@pytest.mark.parametrize("alpha", [0.25, 1.0, -0.5, 3.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alphapo_equals_trls(alpha: float, seed: int) -> None:
    params = PreferenceLossParams(beta=2.5, simpo_gamma=0.4, alphapo_alpha=alpha)
    value_diff, grad_diff, grad = _diffs(random_case(seed, LENGTHS), params)
    assert value_diff <= TOLERANCE and grad_diff <= TOLERANCE
    assert grad.abs().max() > 0  # the loss moves the policy


@pytest.mark.parametrize("alpha", [0.25, -0.5])
def test_alphapo_edge_cases_equal_trls(alpha: float) -> None:
    """Ties (chosen = rejected), saturated margins (logprobs down to -40 per token), one-token
    completions, label smoothing (TRL's CPO simpo reads it), and alpha = 0 (TRL's log-probability
    branch, kitchen's `simpo`)."""
    case = random_case(7, LENGTHS)
    identical = DPOCase(
        torch.cat([case.policy_RT[:4]] * 2), case.reference_RT, case.log_sum_sq_RT, (*LENGTHS[:4], *LENGTHS[:4])
    )
    wide = random_case(8, LENGTHS, spread=40.0)
    short = random_case(9, (1, 1, 1, 1, 1, 2, 1, 3))
    base = PreferenceLossParams(beta=2.5, simpo_gamma=0.4, alphapo_alpha=alpha)
    for edge in (identical, wide, short):
        value_diff, grad_diff, _ = _diffs(edge, base)
        assert value_diff <= TOLERANCE and grad_diff <= TOLERANCE
    smoothed = PreferenceLossParams(beta=2.5, simpo_gamma=0.4, alphapo_alpha=alpha, label_smoothing=0.2)
    assert max(_diffs(case, smoothed)[:2]) <= TOLERANCE
    at_zero = PreferenceLossParams(beta=2.5, simpo_gamma=0.4, alphapo_alpha=0.0)
    assert max(_diffs(case, at_zero)[:2]) <= TOLERANCE
    sums, lengths = _sums(case, case.policy_RT)
    zero = torch.zeros(4, dtype=torch.float64)
    pairs = PairBatch(sums[:4], sums[4:], zero, zero, lengths[:4], lengths[4:])
    assert preference_loss("alphapo", pairs, at_zero)[0].item() == preference_loss("simpo", pairs, at_zero)[0].item()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**20),
    lengths=st.lists(st.integers(1, 9), min_size=2, max_size=10).filter(lambda xs: len(xs) % 2 == 0),
    beta=st.floats(0.01, 10.0),
    gamma=st.floats(0.0, 2.0),
    alpha=st.floats(-2.0, 4.0).filter(lambda a: abs(a) >= 1e-3),
    spread=st.floats(0.1, 10.0),
)
def test_any_batch_equals_trl(
    seed: int, lengths: list[int], beta: float, gamma: float, alpha: float, spread: float
) -> None:
    """Property: on any batch, beta, gamma and alpha, kitchen's alphapo equals TRL's. (|alpha| at
    least 1e-3: below it TRL's `1 - p^(-alpha)` cancels to a few bits, where kitchen's `expm1`
    keeps the reward's precision; `test_reward_is_increasing_and_tends_to_simpos` checks that.)"""
    params = PreferenceLossParams(beta=beta, simpo_gamma=gamma, alphapo_alpha=alpha)
    value_diff, grad_diff, _ = _diffs(random_case(seed, lengths, spread=spread), params)
    assert value_diff <= 1e-11 and grad_diff <= 1e-11


@settings(max_examples=50, deadline=None)
@given(mean=st.floats(-5.0, -1e-3), alpha=st.floats(-2.0, 2.0).filter(lambda a: abs(a) > 1e-9))
def test_reward_is_increasing_and_tends_to_simpos(mean: float, alpha: float) -> None:
    """Property of the reward shape: increasing in the completion's probability, below its
    log-probability for alpha > 0 (above for alpha < 0), and `l / n` as alpha -> 0."""
    length = torch.tensor([4.0], dtype=torch.float64)
    lower, upper = torch.tensor([4 * mean - 0.1], dtype=torch.float64), torch.tensor([4 * mean], dtype=torch.float64)
    assert alphapo_reward(upper, length, alpha) > alphapo_reward(lower, length, alpha)
    reward = alphapo_reward(upper, length, alpha).item()
    assert (reward <= mean) if alpha > 0 else (reward >= mean)
    assert alphapo_reward(upper, length, 1e-9).item() == pytest.approx(mean, rel=1e-6)
