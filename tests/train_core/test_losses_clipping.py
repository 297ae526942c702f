"""Asymmetric and dual clipping, decoupled PPO, and the clip counts the losses report: hand-worked,
and cross-checked against verl's `compute_policy_loss_vanilla`, TRL's clip-ratio metrics and
AReaL's `ppo_actor_loss_fn` on the same tensors."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from train_core.errors import InvalidInputError
from train_core.losses import (
    BUILTIN_LOSS_NAMES,
    LOSS_SPECS,
    POLICY_TOKENS_KEY,
    clip_counts,
    get_loss_fn,
    loss_ratios,
    merge_loss_metrics,
)

_PROPERTY = settings(max_examples=30, deadline=None)
"""Property tests here run 30 examples with no deadline (the suite's time budget; a busy machine)."""


@st.composite
def _tokens(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Current logprobs, sampling logprobs (log-ratios within +-2.5) and advantages, 1..12 tokens."""
    n = draw(st.integers(1, 12))
    q = draw(st.lists(st.floats(-6, -0.1), min_size=n, max_size=n))
    drift = draw(st.lists(st.floats(-2.5, 2.5), min_size=n, max_size=n))
    adv = draw(st.lists(st.sampled_from([0.0, 1.0, -1.0]) | st.floats(-2, 2), min_size=n, max_size=n))
    q_T = torch.tensor(q, dtype=torch.float64)
    return q_T + torch.tensor(drift, dtype=torch.float64), q_T, torch.tensor(adv, dtype=torch.float64)


def _loss_and_grad(name: str, lp: torch.Tensor, inputs: dict[str, torch.Tensor], config: dict[str, float] | None):
    lp = lp.clone().requires_grad_()
    token_T = get_loss_fn(name).token_losses(lp, inputs, config)
    token_T.sum().backward()
    assert lp.grad is not None
    return token_T.detach(), lp.grad


@pytest.mark.parametrize(
    ("ratio", "advantage", "loss", "grad"),
    [
        (5.0, -1.0, 3.0, 0.0),  # A < 0 and the ratio exploded: capped at -c * A = 3, no gradient
        (2.0, -1.0, 2.0, 2.0),  # A < 0, ratio under c: the plain unclipped term, -r * A
        (5.0, 1.0, -1.28, 0.0),  # A > 0: the dual clip never applies; clip-higher holds it at 1.28
        (0.5, -1.0, 0.8, 0.0),  # A < 0, ratio under the low threshold: clipped at 0.8
    ],
)
def test_dual_clip_and_clip_higher_hand_worked(ratio: float, advantage: float, loss: float, grad: float) -> None:
    config = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28, "clip_ratio_c": 3.0}
    q = torch.tensor([-1.0], dtype=torch.float64)
    token, gradient = _loss_and_grad(
        "ppo", q + math.log(ratio), {"logprobs": q, "advantages": torch.tensor([advantage])}, config
    )
    assert token.tolist() == pytest.approx([loss]) and gradient.tolist() == pytest.approx([grad])


def _verl_vanilla(
    old: torch.Tensor, new: torch.Tensor, adv: torch.Tensor, low: float, high: float, c: float
) -> dict[str, torch.Tensor]:
    """verl core_algos.compute_policy_loss_vanilla, per token before aggregation: ratio from the
    clamped log-ratio, pg_losses1 = -A r, pg_losses2 = -A clip(r, 1 - low, 1 + high),
    clip_pg_losses1 = max of the two, pg_losses3 = -A c, and for A < 0 min(pg_losses3, that);
    clipfrac counts pg_losses2 > pg_losses1, clipfrac_lower counts clip_pg_losses1 > pg_losses3
    with A < 0."""
    ratio = torch.exp(torch.clamp(new - old, -20.0, 20.0))
    pg1, pg2 = -adv * ratio, -adv * torch.clamp(ratio, 1 - low, 1 + high)
    clipped1 = torch.maximum(pg1, pg2)
    pg3 = -adv * c
    losses = torch.where(adv < 0, torch.min(pg3, clipped1), clipped1)
    return {"loss": losses, "clipped": (pg2 > pg1), "dual": (clipped1 > pg3) & (adv < 0)}


@_PROPERTY
@given(_tokens(), st.floats(0.05, 0.4), st.floats(0.05, 0.5), st.floats(1.6, 5.0))
def test_ppo_with_dual_clip_matches_verl(
    tokens: tuple[torch.Tensor, torch.Tensor, torch.Tensor], eps_low: float, eps_high: float, c: float
) -> None:
    lp, q, adv = tokens
    config = {"clip_low_threshold": 1 - eps_low, "clip_high_threshold": 1 + eps_high, "clip_ratio_c": c}
    ours, _ = _loss_and_grad("ppo", lp, {"logprobs": q, "advantages": adv}, config)
    theirs = _verl_vanilla(q, lp, adv, eps_low, eps_high, c)
    assert ours.tolist() == pytest.approx(theirs["loss"].tolist(), rel=1e-9, abs=1e-12)
    counts = get_loss_fn("ppo").metrics(lp, {"logprobs": q, "advantages": adv}, config)
    assert counts["loss/clipped_dual:sum"] == float(theirs["dual"].sum())
    # verl's clipfrac counts either side; ours split them (ties at a bound aside, none here).
    assert counts["loss/clipped_low:sum"] + counts["loss/clipped_high:sum"] == float(theirs["clipped"].sum())


def _trl_clip_ratios(
    coef_1: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float
) -> tuple[float, float]:
    """TRL GRPOTrainer._compute_loss metrics: is_low_clipped = (r < 1 - eps_low) & (A < 0),
    is_high_clipped = (r > 1 + eps_high) & (A > 0), counted over the tokens considered."""
    low = ((coef_1 < 1 - eps_low) & (advantages < 0)).sum()
    high = ((coef_1 > 1 + eps_high) & (advantages > 0)).sum()
    return float(low), float(high)


@_PROPERTY
@given(_tokens(), st.floats(0.05, 0.4), st.floats(0.05, 0.5))
def test_clip_counts_match_trl_and_fractions_are_over_policy_tokens(
    tokens: tuple[torch.Tensor, torch.Tensor, torch.Tensor], eps_low: float, eps_high: float
) -> None:
    lp, q, adv = tokens
    config = {"clip_low_threshold": 1 - eps_low, "clip_high_threshold": 1 + eps_high}
    _, metrics = get_loss_fn("ppo")(lp, {"logprobs": q, "advantages": adv}, config)
    low, high = _trl_clip_ratios((lp - q).exp(), adv, eps_low, eps_high)
    assert (metrics["loss/clipped_low:sum"], metrics["loss/clipped_high:sum"]) == (low, high)
    policy_tokens = float((adv != 0).sum())
    assert metrics[POLICY_TOKENS_KEY] == policy_tokens
    fractions = loss_ratios(metrics)
    assert fractions["loss/clipfrac_low"] == pytest.approx(low / max(policy_tokens, 1))
    assert fractions["loss/clipfrac_high"] == pytest.approx(high / max(policy_tokens, 1))
    assert fractions["loss/clipfrac_dual"] == 0.0  # the dual clip is off by default
    assert all(key.endswith(":sum") for key in metrics), "a backend returns counts, as the Tinker SDK merges them"


def test_clipped_tokens_are_exactly_those_without_gradient() -> None:
    """A token counted as clipped (low, high or dual) is one whose gradient the clip removed."""
    q = torch.full((6,), -1.0, dtype=torch.float64)
    ratios = torch.tensor([0.5, 0.5, 1.5, 1.5, 4.0, 1.0], dtype=torch.float64)
    adv = torch.tensor([-1.0, 1.0, 1.0, -1.0, -1.0, 1.0], dtype=torch.float64)
    lp = q + ratios.log()
    config = {"clip_ratio_c": 3.0}
    _, grad = _loss_and_grad("ppo", lp, {"logprobs": q, "advantages": adv}, config)
    counts = clip_counts(ratios, adv, 0.8, 1.2, 3.0)
    assert counts == {
        "loss/clipped_low:sum": 1.0,  # token 0
        "loss/clipped_high:sum": 1.0,  # token 2
        "loss/clipped_dual:sum": 1.0,  # token 4
        POLICY_TOKENS_KEY: 6.0,
    }
    assert [g == 0 for g in grad.tolist()] == [True, False, True, False, True, False]


def _areal_decoupled(
    logprobs: torch.Tensor,
    proximal: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    eps_clip: float,
    eps_clip_higher: float,
    c_clip: float | None,
    cap: float | None,
) -> torch.Tensor:
    """AReaL ppo_actor_loss_fn (areal/utils/functional.py), per token before the mean: ratio
    against the proximal policy, clipped surrogate with an optional dual clip
    `min(loss, sign(A) * c * A)`, times the behaviour weight `exp(prox - old)`, 0 above the cap."""
    ratio = torch.exp(logprobs - proximal)
    clipped = torch.clamp(ratio, 1.0 - eps_clip, 1.0 + eps_clip_higher)
    pg_loss = torch.max(-adv * ratio, -adv * clipped)
    if c_clip is not None:
        pg_loss = torch.min(pg_loss, torch.sign(adv) * c_clip * adv)
    weight = (proximal - old).exp()
    mask = weight <= cap if cap is not None else torch.ones_like(weight, dtype=torch.bool)
    return pg_loss * torch.where(mask, weight, 0.0)


@_PROPERTY
@given(_tokens(), st.lists(st.floats(-0.8, 0.8), min_size=12, max_size=12), st.booleans(), st.booleans())
def test_decoupled_ppo_matches_areal(
    tokens: tuple[torch.Tensor, torch.Tensor, torch.Tensor], prox_drift: list[float], dual: bool, capped: bool
) -> None:
    lp, q, adv = tokens
    prox = q + torch.tensor(prox_drift[: len(q)], dtype=torch.float64)
    config = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28}
    if dual:
        config["clip_ratio_c"] = 3.0
    if capped:
        config["behaviour_weight_cap"] = 1.5
    inputs = {"logprobs": q, "proximal_logprobs": prox, "advantages": adv}
    ours, _ = _loss_and_grad("decoupled_ppo", lp, inputs, config)
    theirs = _areal_decoupled(lp, prox, q, adv, 0.2, 0.28, 3.0 if dual else None, 1.5 if capped else None)
    assert ours.tolist() == pytest.approx(theirs.tolist(), rel=1e-9, abs=1e-12)


@_PROPERTY
@given(_tokens(), st.lists(st.floats(-0.8, 0.8), min_size=12, max_size=12))
def test_decoupled_ppo_is_ppo_around_the_proximal_policy_with_weighted_advantages(
    tokens: tuple[torch.Tensor, torch.Tensor, torch.Tensor], prox_drift: list[float]
) -> None:
    """With prox = q it is ppo; in general it is ppo(lp, prox, exp(prox - q) * A), value and
    gradient (so a backend with built-in ppo only could run it on rewritten datums)."""
    lp, q, adv = tokens
    prox = q + torch.tensor(prox_drift[: len(q)], dtype=torch.float64)
    same, same_grad = _loss_and_grad(
        "decoupled_ppo", lp, {"logprobs": q, "proximal_logprobs": q, "advantages": adv}, None
    )
    ppo, ppo_grad = _loss_and_grad("ppo", lp, {"logprobs": q, "advantages": adv}, None)
    assert same.tolist() == pytest.approx(ppo.tolist()) and same_grad.tolist() == pytest.approx(ppo_grad.tolist())
    ours, grad = _loss_and_grad(
        "decoupled_ppo", lp, {"logprobs": q, "proximal_logprobs": prox, "advantages": adv}, None
    )
    rewritten = {"logprobs": prox, "advantages": (prox - q).exp() * adv}
    expected, expected_grad = _loss_and_grad("ppo", lp, rewritten, None)
    assert ours.tolist() == pytest.approx(expected.tolist(), abs=1e-12)
    assert grad.tolist() == pytest.approx(expected_grad.tolist(), abs=1e-12)


def test_gspo_counts_clips_per_sequence_on_each_datums_own_ratio() -> None:
    """Two datums: the first drifted (ratio 1.5, clipped high for its A > 0 tokens), the second not."""
    q = torch.tensor([-1.0, -1.0, -1.0], dtype=torch.float64)
    lp = torch.tensor([-1.0 + math.log(1.5), -1.0 + math.log(1.5), -1.0], dtype=torch.float64)
    inputs = {"logprobs": q, "advantages": torch.tensor([1.0, 1.0, 1.0]), "sequence_ratio_mask": torch.ones(3)}
    config = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    _, metrics = get_loss_fn("gspo")(lp, inputs, config, lengths_D=[2, 1])
    assert metrics["loss/clipped_high:sum"] == 2.0 and loss_ratios(metrics)["loss/clipfrac_high"] == pytest.approx(
        2 / 3
    )


def test_merged_metrics_sum_counts_and_recompute_fractions() -> None:
    parts = [
        {
            "loss:sum": 1.0,
            "loss/clipped_low:sum": 1.0,
            "loss/clipped_high:sum": 0.0,
            POLICY_TOKENS_KEY: 2.0,
            "loss/clipfrac_low": 0.5,
        },
        {
            "loss:sum": 2.0,
            "loss/clipped_low:sum": 0.0,
            "loss/clipped_high:sum": 3.0,
            POLICY_TOKENS_KEY: 8.0,
            "loss/clipfrac_low": 0.0,
        },
    ]
    merged = merge_loss_metrics(parts)
    assert merged["loss:sum"] == 3.0
    assert "loss/clipfrac_low" not in merged  # fractions are not summed: they come from the counts
    fractions = loss_ratios(merged)
    assert fractions["loss/clipfrac_low"] == pytest.approx(0.1) and fractions["loss/clipfrac_high"] == pytest.approx(
        0.3
    )
    assert loss_ratios({"loss:sum": 1.0}) == {}  # a loss that clips nothing reports no fractions
    _, metrics = get_loss_fn("importance_sampling")(
        torch.zeros(2), {"logprobs": torch.zeros(2), "advantages": torch.ones(2)}
    )
    assert metrics == {"loss:sum": -2.0}


def test_clip_config_is_checked_when_resolved() -> None:
    with pytest.raises(InvalidInputError, match=r"clip_ratio_c \(dual clip\) must be > 1"):
        get_loss_fn("ppo").resolve_config({"clip_ratio_c": 1.0})
    with pytest.raises(InvalidInputError, match=r"clip_low_threshold 1\.3 is above clip_high_threshold 1\.2"):
        get_loss_fn("ppo").resolve_config({"clip_low_threshold": 1.3})
    with pytest.raises(InvalidInputError, match="behaviour_weight_cap must be > 0"):
        get_loss_fn("decoupled_ppo").resolve_config({"behaviour_weight_cap": 0.0})


def test_what_needs_the_custom_route_on_the_tinker_service() -> None:
    ppo = get_loss_fn("ppo")
    assert ppo.custom_route_reasons(None) == []
    assert ppo.custom_route_reasons({"clip_high_threshold": 1.28}) == []  # clip-higher is the service's own
    assert ppo.custom_route_reasons({"clip_ratio_c": 3.0}) == [
        "loss_fn_config['clip_ratio_c'] is kitchen's extension of 'ppo'"
    ]
    assert get_loss_fn("decoupled_ppo").custom_route_reasons(None) == [
        "loss 'decoupled_ppo' is kitchen's own, not a Tinker built-in"
    ]
    assert frozenset(LOSS_SPECS) - BUILTIN_LOSS_NAMES == {"decoupled_ppo", "sapo", "vespo"}
