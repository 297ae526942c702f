"""Nash-MD's loss (`train_core.preference.nash_md`) against a closed-form oracle of TRL's
`NashMDTrainer._compute_losses` (TRL 1.9; TRL 1.16, the test extra, no longer ships Nash-MD, so
`benchmarks/nash_md_vs_trl.py` runs TRL's own method beside an install of 1.9). The oracle works
token by token in Python floats and takes the gradient from the derivative of each term, so it
shares no code with the implementation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from train_core.preference.nash_md import make_nash_md_custom_loss, nash_md_loss
from train_core.supervised import datum_from_tokens_weights

SEEDS = (0, 1, 2, 3)


def _oracle(
    policy: list[list[float]],
    reference: list[list[float]],
    mask: list[list[bool]],
    probability: list[float],
    beta: float,
) -> tuple[float, list[list[float]]]:
    """(loss, d loss / d log pi(y_t)) by hand: per prompt `beta * sum (lp - ref) * lp - (p - 0.5) * sum lp`,
    the log-ratio held constant, averaged over prompts."""
    prompts = len(policy)
    total, grads = 0.0, []
    for lp_T, ref_T, m_T, p in zip(policy, reference, mask, probability, strict=True):
        kl = sum((lp - ref) * lp for lp, ref, m in zip(lp_T, ref_T, m_T, strict=True) if m)
        total += beta * kl - (p - 0.5) * sum(lp for lp, m in zip(lp_T, m_T, strict=True) if m)
        grads.append(
            [
                (beta * (lp - ref) - (p - 0.5)) / prompts if m else 0.0
                for lp, ref, m in zip(lp_T, ref_T, m_T, strict=True)
            ]
        )
    return total / prompts, grads


def _check(
    policy: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor, probability: torch.Tensor, beta: float
) -> None:
    leaf = policy.clone().requires_grad_(True)
    loss, score_P, kl_P = nash_md_loss(leaf, reference, mask, probability, beta)
    loss.backward()
    want, grads = _oracle(policy.tolist(), reference.tolist(), mask.tolist(), probability.tolist(), beta)
    assert abs(loss.item() - want) <= 1e-12 * max(1.0, abs(want))
    assert leaf.grad is not None
    assert (leaf.grad - torch.tensor(grads, dtype=torch.float64)).abs().max() <= 1e-12
    masked = policy * mask
    assert torch.allclose(score_P, (probability - 0.5) * masked.sum(1), rtol=0, atol=1e-12)
    assert torch.allclose(kl_P, (masked - reference * mask).sum(1), rtol=0, atol=1e-12)


def _random(
    seed: int, prompts: int = 5, length: int = 7
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    policy = -torch.rand(prompts, length, generator=generator, dtype=torch.float64) * 4
    reference = -torch.rand(prompts, length, generator=generator, dtype=torch.float64) * 4
    mask = torch.rand(prompts, length, generator=generator) < 0.8
    probability = torch.rand(prompts, generator=generator, dtype=torch.float64)
    return policy, reference, mask, probability


@pytest.mark.parametrize("seed", SEEDS)
def test_nash_md_equals_trls_formula_on_random_batches(seed: int) -> None:
    _check(*_random(seed), beta=0.05 + 0.1 * seed)


def test_nash_md_edge_cases() -> None:
    """A tie (p = 0.5: only the KL term pulls), the policy equal to the reference (KL term and its
    gradient vanish), a sure win and a sure loss, an empty completion (all masked: contributes 0)."""
    policy, reference, mask, _ = _random(9, prompts=4)
    tie = torch.full((4,), 0.5, dtype=torch.float64)
    _check(policy, reference, mask, tie, 0.1)
    _check(policy, policy.clone(), mask, torch.tensor([0.0, 1.0, 0.5, 0.25], dtype=torch.float64), 0.3)
    mask[2] = False
    _check(policy, reference, mask, torch.tensor([1.0, 0.0, 1.0, 0.5], dtype=torch.float64), 0.2)
    leaf = policy.clone().requires_grad_(True)
    loss, _, _ = nash_md_loss(leaf, policy.clone(), torch.ones_like(mask), tie, 0.1)
    loss.backward()
    assert loss.item() == 0.0 and leaf.grad is not None and leaf.grad.abs().max().item() == 0.0


def test_a_win_raises_and_a_loss_lowers_the_completions_logprob() -> None:
    for probability, sign in ((1.0, -1.0), (0.0, 1.0)):
        leaf = torch.full((1, 3), -2.0, dtype=torch.float64, requires_grad=True)
        loss, _, _ = nash_md_loss(leaf, leaf.detach().clone(), torch.ones(1, 3), torch.tensor([probability]), 0.1)
        loss.backward()
        assert leaf.grad is not None and bool((torch.sign(leaf.grad) == sign).all())


def test_bad_inputs_are_refused() -> None:
    one = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="one shape"):
        nash_md_loss(one, torch.zeros(2, 4), one.bool(), torch.zeros(2), 0.1)
    with pytest.raises(ValueError, match="probabilities for 2 prompts"):
        nash_md_loss(one, one, one.bool(), torch.zeros(3), 0.1)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        make_nash_md_custom_loss([], [1.5], 0.1)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.tuples(st.floats(-50, 0), st.floats(-50, 0), st.booleans()), min_size=4, max_size=4),
            st.floats(0, 1),
        ),
        min_size=1,
        max_size=6,
    ),
    st.floats(0.0, 2.0),
)
def test_nash_md_property_matches_the_oracle(
    rows: list[tuple[list[tuple[float, float, bool]], float]], beta: float
) -> None:
    policy = torch.tensor([[t[0] for t in tokens] for tokens, _ in rows], dtype=torch.float64)
    reference = torch.tensor([[t[1] for t in tokens] for tokens, _ in rows], dtype=torch.float64)
    mask = torch.tensor([[t[2] for t in tokens] for tokens, _ in rows])
    _check(policy, reference, mask, torch.tensor([p for _, p in rows], dtype=torch.float64), beta)


def test_the_custom_loss_counts_completion_tokens_only() -> None:
    """`make_nash_md_custom_loss` on one datum per prompt: prompt tokens (weight 0) do not count,
    and the result equals `nash_md_loss` on the completions' tokens, padded."""
    generator = torch.Generator().manual_seed(7)
    data, policy_D, reference_D = [], [], []
    for prompt, completion in ((2, 3), (3, 5), (1, 1)):
        data.append(datum_from_tokens_weights([1] * (prompt + completion), [0.0] * prompt + [1.0] * completion))
        policy_D.append(-torch.rand(prompt + completion - 1, generator=generator, dtype=torch.float64))
        reference_D.append(-torch.rand(prompt + completion - 1, generator=generator, dtype=torch.float64))
    probabilities = [1.0, 0.0, 0.5]
    loss, metrics = make_nash_md_custom_loss(reference_D, probabilities, 0.2)(data, policy_D)
    completions = [(3, 2), (5, 3), (1, 1)]
    policy_PT = torch.zeros(3, 5, dtype=torch.float64)
    reference_PT = torch.zeros(3, 5, dtype=torch.float64)
    mask_PT = torch.zeros(3, 5, dtype=torch.bool)
    for i, (completion, prompt) in enumerate(completions):
        policy_PT[i, :completion] = policy_D[i][prompt - 1 :]
        reference_PT[i, :completion] = reference_D[i][prompt - 1 :]
        mask_PT[i, :completion] = True
    want, _, _ = nash_md_loss(policy_PT, reference_PT, mask_PT, torch.tensor(probabilities, dtype=torch.float64), 0.2)
    assert loss.item() == pytest.approx(want.item(), abs=1e-12)
    assert metrics["num_tokens"] == 9 and metrics["nash_md/probability"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="one of each per prompt"):
        make_nash_md_custom_loss(reference_D, [0.5], 0.2)(data, policy_D)
