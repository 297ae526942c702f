"""BCO (`kto.loss_type: bco`, `train_core.preference.bco`) against TRL 1.16's own code.

TRL 1.16 has no `BCOTrainer` (its last release with one was 0.26, `trl.experimental.bco`); what
it keeps is DPO's `bco_pair`, `-log sigma(beta c) - log sigma(-beta r)`, the same classifier on a
pair. Shifting both references of a pair by `delta / beta` turns it into BCO's shifted classifier
on the two examples: so BCO with any `delta`, on P desirable and P undesirable examples, is half
of `DPOTrainer._compute_loss` with `loss_type="bco_pair"` on those shifted references, value and
gradient (the gradient with respect to the policy's per-token logprobs; `delta` is a constant).
The running mean is checked against its definition (the mean of every reward seen), which is
what TRL's `RunningMoments.mean` computes. TRL is in the test extra: imported, never skipped."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.rlhf.trl_dpo_harness import DPOCase, DPOSettings, interleaved, random_case, trl_loss
from train_core.preference.bco import RunningMean, bco_from_token_logprobs, bco_loss

pytestmark = pytest.mark.slow  # importing TRL takes 10-50 s on 2 cores

LENGTHS = (3, 8, 5, 6, 2, 7, 8, 4)  # 4 desirable rows, then 4 undesirable ones
TOLERANCE = 1e-12


def _ours(case: DPOCase, policy_RT: torch.Tensor, beta: float, delta: float) -> torch.Tensor:
    """BCO on the case's rows as examples (chosen rows desirable), with `delta` as the mean."""
    shift = case.mask_RL[:, 1:].to(policy_RT.dtype)
    rows = range(len(case.lengths))
    loss, _ = bco_from_token_logprobs(
        [policy_RT[row] for row in rows],
        [case.reference_RT[row] for row in rows],
        [shift[row] for row in rows],
        [row < case.pairs for row in rows],
        beta,
        RunningMean(mean=delta, count=1),
        update=False,
    )
    return loss


def _theirs(case: DPOCase, policy_RT: torch.Tensor, beta: float, delta: float) -> torch.Tensor:
    """Half TRL's `bco_pair` with every reference's last (completion) token raised by `delta / beta`."""
    shifted = case.reference_RT.clone()
    shifted[:, -1] += delta / beta
    moved = DPOCase(case.policy_RT, shifted, case.log_sum_sq_RT, case.lengths)
    return 0.5 * trl_loss(DPOSettings(loss_type=("bco_pair",), beta=beta), moved, policy_RT)


def _diffs(case: DPOCase, beta: float, delta: float) -> tuple[float, float, torch.Tensor]:
    ours_RT = case.policy_RT.clone().requires_grad_(True)
    theirs_RT = case.policy_RT.clone().requires_grad_(True)
    ours, theirs = _ours(case, ours_RT, beta, delta), _theirs(case, theirs_RT, beta, delta)
    ours.backward()
    theirs.backward()
    assert ours_RT.grad is not None and theirs_RT.grad is not None
    assert torch.isfinite(ours)
    value_diff = float((ours - theirs).detach().abs()) / max(1.0, float(theirs.detach().abs()))
    return value_diff, float((ours_RT.grad - theirs_RT.grad).abs().max()), ours_RT.grad


@pytest.mark.parametrize("delta", [0.0, 0.37, -1.5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bco_equals_trls_classifier(seed: int, delta: float) -> None:
    value_diff, grad_diff, grad = _diffs(random_case(seed, LENGTHS), 0.3, delta)
    assert value_diff <= TOLERANCE and grad_diff <= TOLERANCE
    assert grad.abs().max() > 0


def test_bco_edge_cases_equal_trls() -> None:
    """Ties (policy = reference: every logit is `-delta`), saturated logits (logprobs down to -40
    per token, beta 5), one-token completions, and a delta at float32 rounding of a reward."""
    case = random_case(7, LENGTHS)
    tie = DPOCase(case.reference_RT.clone(), case.reference_RT, case.log_sum_sq_RT, LENGTHS)
    wide = random_case(8, LENGTHS, spread=40.0)
    short = random_case(9, (1, 1, 1, 1, 1, 2, 1, 3))
    for edge, beta, delta in ((tie, 0.3, 0.2), (tie, 0.3, 0.0), (wide, 5.0, 3.0), (short, 0.1, -0.05)):
        value_diff, grad_diff, _ = _diffs(edge, beta, delta)
        assert value_diff <= TOLERANCE and grad_diff <= TOLERANCE
    value_diff, grad_diff, _ = _diffs(case, 0.3, 0.3 * float(case.policy_RT[0, -1]) * (1 + 2.0**-23))
    assert value_diff <= TOLERANCE and grad_diff <= TOLERANCE


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**20),
    lengths=st.lists(st.integers(1, 9), min_size=2, max_size=10).filter(lambda xs: len(xs) % 2 == 0),
    beta=st.floats(0.01, 5.0),
    delta=st.floats(-5.0, 5.0),
    spread=st.floats(0.1, 20.0),
)
def test_any_batch_equals_trl(seed: int, lengths: list[int], beta: float, delta: float, spread: float) -> None:
    """Property: on any batch, beta and delta, BCO equals TRL's shifted classifier."""
    value_diff, grad_diff, _ = _diffs(random_case(seed, lengths, spread=spread), beta, delta)
    assert value_diff <= 1e-11 and grad_diff <= 1e-11


@settings(max_examples=50, deadline=None)
@given(batches=st.lists(st.lists(st.floats(-50.0, 50.0), min_size=0, max_size=9), min_size=1, max_size=8))
def test_the_running_mean_is_the_mean_of_every_reward_seen(batches: list[list[float]]) -> None:
    """Property: after any sequence of batches (empty ones included), `delta` is the mean of all
    their values, as TRL's `RunningMoments.mean` (0 before any value)."""
    running = RunningMean()
    for batch in batches:
        running.update(torch.tensor(batch, dtype=torch.float64))
    seen = [value for batch in batches for value in batch]
    expected = sum(seen) / len(seen) if seen else 0.0
    assert running.count == len(seen)
    assert running.mean == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_a_training_step_updates_delta_with_its_own_rewards_first() -> None:
    """As TRL's `bco_loss(do_train=True)`: the batch's rewards enter the mean before the loss
    reads it, so the first step's `delta` is its own mean reward; evaluation does not update it."""
    case = random_case(3, LENGTHS)
    shift = case.mask_RL[:, 1:].double()
    rows = interleaved(case, case.policy_RT)
    refs, weights = interleaved(case, case.reference_RT), interleaved(case, shift)
    labels = [index % 2 == 0 for index in range(len(rows))]
    running, beta = RunningMean(), 0.3
    _, first = bco_from_token_logprobs(rows, refs, weights, labels, beta, running, update=True)
    rewards = [beta * float(((lp - ref) * w).sum()) for lp, ref, w in zip(rows, refs, weights, strict=True)]
    assert first["delta"] == pytest.approx(sum(rewards) / len(rewards), rel=1e-12)
    _, again = bco_from_token_logprobs(rows, refs, weights, labels, beta, running, update=False)
    assert again["delta"] == first["delta"] and running.count == len(rows)
    logratio = torch.tensor(rewards, dtype=torch.float64) / beta
    loss, _ = bco_loss(logratio, torch.tensor(labels), first["delta"], beta)
    assert loss.item() == pytest.approx(again["bco_loss"], rel=1e-12)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty 1-D"):
        bco_loss(torch.zeros(3), torch.ones(2, dtype=torch.bool), 0.0, 0.1)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        bco_loss(torch.zeros(0), torch.ones(0, dtype=torch.bool), 0.0, 0.1)
