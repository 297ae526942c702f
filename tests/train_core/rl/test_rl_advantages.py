"""Advantage estimators: hand-worked batches, properties, and cross-checks against the published
implementations' formulas on the same rewards (each test names its reference)."""

from __future__ import annotations

import math
from collections import defaultdict

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from rl_test_factories import single_turn_group, trajectory, transition

from train_core.errors import InvalidInputError
from train_core.rl.advantages import (
    ADVANTAGE_ESTIMATORS,
    estimator_options,
    get_advantage_estimator,
    grpo,
    opo,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
)
from train_core.rl.data_processing import compute_advantages
from train_core.rl.types import TrajectoryGroup

_PROPERTY = settings(max_examples=30, deadline=None)
"""Property tests here run 30 examples with no deadline (the suite's time budget; a busy machine)."""

rewards_G = st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=8)
_BATCH = st.lists(st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=6), min_size=1, max_size=4)


def _tensors(rewards_P: list[list[float]]) -> list[torch.Tensor]:
    return [torch.tensor(r, dtype=torch.float64) for r in rewards_P]


def _lengths(rewards_P: list[list[float]], seed: int = 0) -> list[torch.Tensor]:
    """Made-up action-token counts 1..7 per trajectory."""
    return [torch.tensor([float(1 + (seed + 3 * i + j) % 7) for j in range(len(r))]) for i, r in enumerate(rewards_P)]


def _group_with_lengths(rewards: list[float], lengths: list[int]) -> TrajectoryGroup:
    return TrajectoryGroup(
        [trajectory(transition([1], [5] * n, reward=r, done=True)) for r, n in zip(rewards, lengths, strict=True)],
        final_rewards_G=[0.0] * len(rewards),
        metrics_G=[{} for _ in rewards],
    )


# -- the default is unchanged ----------------------------------------------------------------------


def test_default_is_group_centring_as_before() -> None:
    # Group 0: rewards 1, 0, 0, 1 -> mean 0.5. Group 1: step rewards 0, 0 plus final rewards 3, 1.
    groups = [single_turn_group([1, 0, 0, 1]), single_turn_group([0, 0], final_rewards_G=[3, 1])]
    a0, a1 = compute_advantages(groups)
    assert a0.tolist() == [0.5, -0.5, -0.5, 0.5]
    assert a1.tolist() == [1.0, -1.0]
    assert [a.tolist() for a in compute_advantages(groups, "dr_grpo")] == [a0.tolist(), a1.tolist()]


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_constant_groups_and_singletons_get_exact_zeros_under_every_group_estimator(name: str) -> None:
    groups = [single_turn_group([0.7, 0.7, 0.7]), single_turn_group([0.3])]
    if name.startswith("reinforce_pp") and name != "reinforce_pp_baseline":
        # No per-group baseline: an all-equal *batch* whitens to zeros instead.
        groups = [single_turn_group([0.7, 0.7]), single_turn_group([0.7])]
    for advantages in compute_advantages(groups, name):
        assert advantages.tolist() == [0.0] * len(advantages)


# -- grpo / dr_grpo --------------------------------------------------------------------------------


def test_grpo_hand_worked_scales() -> None:
    """Rewards [0, 0, 0, 4]: mean 1, Bessel std 2. Batch with [1, 3] too: batch std of all six."""
    rewards = _tensors([[0.0, 0.0, 0.0, 4.0], [1.0, 3.0]])
    lengths = _lengths([[0.0] * 4, [0.0] * 2])
    group = grpo(rewards, lengths, scale_rewards="group")
    assert group[0].tolist() == pytest.approx([x / (2 + 1e-4) for x in [-1, -1, -1, 3]])
    assert group[1].tolist() == pytest.approx([-1 / (2**0.5 + 1e-4), 1 / (2**0.5 + 1e-4)])
    batch_std = torch.tensor([0.0, 0.0, 0.0, 4.0, 1.0, 3.0], dtype=torch.float64).std().item()
    batch = grpo(rewards, lengths, scale_rewards="batch")
    assert batch[1].tolist() == pytest.approx([-1 / (batch_std + 1e-4), 1 / (batch_std + 1e-4)])
    assert grpo(rewards, lengths, scale_rewards="none")[0].tolist() == [-1.0, -1.0, -1.0, 3.0]


def _trl_grpo(rewards_P: list[list[float]], scale_rewards: str) -> list[list[float]]:
    """TRL GRPOTrainer._generate_and_score_completions (trl/trainer/grpo_trainer.py): rewards
    viewed as [-1, G], group mean repeated, `std` Bessel-corrected (per group, or over the whole
    batch for "batch"), advantages divided by (std + 1e-4) unless scale_rewards is "none"."""
    flat = torch.tensor([r for group in rewards_P for r in group], dtype=torch.float64)
    sizes = [len(g) for g in rewards_P]
    means = torch.cat([flat_g.mean().repeat(len(flat_g)) for flat_g in flat.split(sizes)])
    advantages = flat - means
    if scale_rewards == "group":
        std = torch.cat([g.std().repeat(len(g)) for g in flat.split(sizes)])
    else:
        std = flat.std().expand_as(flat)
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    return [a.tolist() for a in advantages.split(sizes)]


@_PROPERTY
@given(
    st.integers(2, 6).flatmap(
        lambda g: st.lists(st.lists(st.floats(-5, 5), min_size=g, max_size=g), min_size=1, max_size=4)
    ),
    st.sampled_from(["group", "batch", "none"]),
)
def test_grpo_matches_trl(rewards_P: list[list[float]], scale_rewards: str) -> None:
    ours = grpo(_tensors(rewards_P), _lengths(rewards_P), scale_rewards=scale_rewards)  # type: ignore[arg-type]
    for mine, theirs, group in zip(ours, _trl_grpo(rewards_P, scale_rewards), rewards_P, strict=True):
        if scale_rewards == "group" and len(set(group)) == 1:
            continue  # TRL: 0 / (0 + 1e-4) up to float noise; ours is exactly 0 (checked elsewhere)
        assert mine.tolist() == pytest.approx(theirs, rel=1e-6, abs=1e-6)


def _verl_grpo(rewards_P: list[list[float]], norm_adv_by_std: bool) -> list[list[float]]:
    """verl core_algos.compute_grpo_outcome_advantage: per prompt index, mean and torch.std
    (Bessel), `(score - mean) / (std + 1e-6)` when norm_adv_by_std_in_grpo, else `score - mean`
    (Dr. GRPO); a one-sample group gets mean 0 and std 1 there (ours gives 0, see the module)."""
    out = []
    for group in rewards_P:
        scores = torch.tensor(group, dtype=torch.float64)
        mean, std = scores.mean(), scores.std()
        out.append(((scores - mean) / (std + 1e-6) if norm_adv_by_std else scores - mean).tolist())
    return out


@_PROPERTY
@given(st.lists(st.lists(st.floats(-5, 5), min_size=2, max_size=6), min_size=1, max_size=4))
def test_dr_grpo_matches_verl_without_std(rewards_P: list[list[float]]) -> None:
    ours = ADVANTAGE_ESTIMATORS["dr_grpo"](_tensors(rewards_P), _lengths(rewards_P))
    for mine, theirs in zip(ours, _verl_grpo(rewards_P, norm_adv_by_std=False), strict=True):
        assert mine.tolist() == pytest.approx(theirs, abs=1e-9)


@_PROPERTY
@given(st.lists(rewards_G, min_size=1, max_size=4))
def test_group_centred_advantages_sum_to_zero_and_keep_reward_order(rewards_P: list[list[float]]) -> None:
    for rewards, advantages in zip(
        rewards_P, compute_advantages([single_turn_group(r) for r in rewards_P]), strict=True
    ):
        assert float(advantages.sum()) == pytest.approx(0.0, abs=1e-9)
        diffs = torch.tensor(rewards, dtype=torch.float64) - advantages
        assert torch.allclose(diffs, diffs[0].expand_as(diffs))  # R - A is the same for every member


@_PROPERTY
@given(rewards_G)
def test_group_scaled_advantages_have_unit_bessel_std_when_rewards_vary(rewards: list[float]) -> None:
    (a,) = grpo(_tensors([rewards]), _lengths([rewards]), scale_rewards="group")
    std = torch.tensor(rewards, dtype=torch.float64).std() if len(rewards) > 1 else torch.tensor(0.0)
    if std > 1e-2:
        assert float(a.std()) == pytest.approx(float(std / (std + 1e-4)), rel=1e-6)


def test_scale_rewards_must_be_a_known_value() -> None:
    with pytest.raises(InvalidInputError, match="scale_rewards must be one of"):
        compute_advantages([single_turn_group([0.0, 1.0])], "grpo", {"scale_rewards": "prompt"})


# -- rloo ------------------------------------------------------------------------------------------


def test_rloo_hand_worked() -> None:
    """Rewards [1, 0, 0, 1]: the first's baseline is mean(0, 0, 1) = 1/3, so A = 2/3."""
    (a,) = rloo(_tensors([[1.0, 0.0, 0.0, 1.0]]), _lengths([[0.0] * 4]))
    assert a.tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])


@_PROPERTY
@given(st.lists(st.floats(-5, 5), min_size=2, max_size=8))
def test_rloo_baseline_excludes_the_sample(rewards: list[float]) -> None:
    (a,) = rloo(_tensors([rewards]), _lengths([rewards]))
    for i, r in enumerate(rewards):
        others = rewards[:i] + rewards[i + 1 :]
        assert float(a[i]) == pytest.approx(r - sum(others) / len(others), abs=1e-9)
        # Changing the sample's own reward moves its baseline not at all: A moves one for one.
        bumped = [*rewards[:i], r + 1.0, *rewards[i + 1 :]]
        (b,) = rloo(_tensors([bumped]), _lengths([bumped]))
        assert float(b[i] - a[i]) == pytest.approx(1.0, abs=1e-9)


def _verl_rloo(rewards_P: list[list[float]]) -> list[list[float]]:
    """verl core_algos.compute_rloo_outcome_advantage: `score * n / (n - 1) - mean * n / (n - 1)`."""
    out = []
    for group in rewards_P:
        scores = torch.tensor(group, dtype=torch.float64)
        n = len(group)
        out.append((scores * n / (n - 1) - scores.mean() * n / (n - 1)).tolist())
    return out


@_PROPERTY
@given(st.lists(st.lists(st.floats(-5, 5), min_size=2, max_size=6), min_size=1, max_size=4))
def test_rloo_matches_verl(rewards_P: list[list[float]]) -> None:
    for mine, theirs in zip(rloo(_tensors(rewards_P), _lengths(rewards_P)), _verl_rloo(rewards_P), strict=True):
        assert mine.tolist() == pytest.approx(theirs, abs=1e-9)


# -- opo -------------------------------------------------------------------------------------------


def test_opo_hand_worked_length_weighted_baseline() -> None:
    """Rewards [1, 0] with lengths [3, 1]: baseline (3*1 + 1*0) / 4 = 0.75."""
    (a,) = compute_advantages([_group_with_lengths([1.0, 0.0], [3, 1])], "opo")
    assert a.tolist() == pytest.approx([0.25, -0.75])


def _verl_opo(rewards_P: list[list[float]], lengths_P: list[torch.Tensor]) -> list[list[float]]:
    """verl core_algos.compute_opo_outcome_advantage: baseline `(len * score).sum() / len.sum()`."""
    out = []
    for group, lengths in zip(rewards_P, lengths_P, strict=True):
        scores = torch.tensor(group, dtype=torch.float64)
        out.append((scores - (lengths * scores).sum() / lengths.sum()).tolist())
    return out


@_PROPERTY
@given(st.lists(st.lists(st.floats(-5, 5), min_size=2, max_size=6), min_size=1, max_size=4), st.integers(0, 6))
def test_opo_matches_verl_and_equals_the_mean_baseline_on_equal_lengths(
    rewards_P: list[list[float]], seed: int
) -> None:
    lengths = _lengths(rewards_P, seed)
    for mine, theirs in zip(opo(_tensors(rewards_P), lengths), _verl_opo(rewards_P, lengths), strict=True):
        assert mine.tolist() == pytest.approx(theirs, abs=1e-9)
    equal = [torch.full((len(r),), 5.0, dtype=torch.float64) for r in rewards_P]
    for mine, centred in zip(
        opo(_tensors(rewards_P), equal), compute_advantages([single_turn_group(r) for r in rewards_P]), strict=True
    ):
        assert mine.tolist() == pytest.approx(centred.tolist(), abs=1e-9)


# -- reinforce++ -----------------------------------------------------------------------------------


def test_reinforce_pp_hand_worked_token_weighted_whitening() -> None:
    """Rewards [1, 0] with 3 and 1 tokens: token mean 0.75, Bessel variance over 4 tokens
    (3 * 0.0625 + 0.5625) / 3 = 0.25, so A = (r - 0.75) / sqrt(0.25 + 1e-8)."""
    (a,) = compute_advantages([_group_with_lengths([1.0, 0.0], [3, 1])], "reinforce_pp")
    scale = 1 / math.sqrt(0.25 + 1e-8)
    assert a.tolist() == pytest.approx([0.25 * scale, -0.75 * scale])


def _verl_masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl utils.torch_functional.masked_whiten: masked mean, masked variance times the Bessel
    correction `n / (n - 1)`, `(x - mean) * rsqrt(var + 1e-8)`."""
    mean = (values * mask).sum() / mask.sum()
    var = (((values - mean) ** 2) * mask).sum() / mask.sum() * (mask.sum() / (mask.sum() - 1))
    return (values - mean) * torch.rsqrt(var + 1e-8)


def _verl_reinforce_pp(
    rewards_P: list[list[float]], lengths_P: list[torch.Tensor], baseline: bool
) -> list[list[float]]:
    """verl core_algos.compute_reinforce_plus_plus(_baseline)_outcome_advantage on outcome rewards:
    the score (minus its group mean for the baseline variant; verl gives a one-sample group mean
    0) tiled over each response's tokens, then `masked_whiten` over every token of the batch."""
    width = int(max(float(lengths.max()) for lengths in lengths_P))
    rows, masks = [], []
    for group, lengths in zip(rewards_P, lengths_P, strict=True):
        scores = torch.tensor(group, dtype=torch.float64)
        if baseline and len(group) > 1:
            scores = scores - scores.mean()
        for score, n in zip(scores, lengths.tolist(), strict=True):
            rows.append(score.repeat(width))
            masks.append(torch.tensor([1.0] * int(n) + [0.0] * (width - int(n)), dtype=torch.float64))
    whitened = _verl_masked_whiten(torch.stack(rows), torch.stack(masks))
    first_token = whitened[:, 0].tolist()  # every response's tokens carry the same value
    out, start = [], 0
    for group in rewards_P:
        out.append(first_token[start : start + len(group)])
        start += len(group)
    return out


@_PROPERTY
@given(st.lists(st.lists(st.floats(-5, 5), min_size=2, max_size=5), min_size=1, max_size=4), st.integers(0, 6))
def test_reinforce_pp_and_its_baseline_variant_match_verl(rewards_P: list[list[float]], seed: int) -> None:
    lengths = _lengths(rewards_P, seed)
    flat = [r for g in rewards_P for r in g]
    for function, baseline in ((reinforce_pp, False), (reinforce_pp_baseline, True)):
        theirs = _verl_reinforce_pp(rewards_P, lengths, baseline)
        if max(abs(x) for g in theirs for x in g) > 1e3 or (not baseline and len(set(flat)) == 1):
            continue  # near-zero spread: both amplify float noise by 1e4 (ours gives exact zeros)
        for mine, expected in zip(function(_tensors(rewards_P), lengths), theirs, strict=True):
            assert mine.tolist() == pytest.approx(expected, rel=1e-6, abs=1e-6)


@_PROPERTY
@given(_BATCH, st.integers(0, 6))
def test_reinforce_pp_has_token_weighted_zero_mean_and_unit_variance(rewards_P: list[list[float]], seed: int) -> None:
    lengths = _lengths(rewards_P, seed)
    advantages = torch.cat(reinforce_pp(_tensors(rewards_P), lengths))
    weights = torch.cat(lengths)
    rewards = torch.tensor([r for g in rewards_P for r in g], dtype=torch.float64)
    spread = float((weights * (rewards - (weights * rewards).sum() / weights.sum()) ** 2).sum() / (weights.sum() - 1))
    assert float((weights * advantages).sum()) == pytest.approx(0.0, abs=1e-6)
    if spread > 1e-3:
        variance = float((weights * advantages**2).sum() / (weights.sum() - 1))
        assert variance == pytest.approx(spread / (spread + 1e-8), rel=1e-6)


@_PROPERTY
@given(_BATCH)
def test_reinforce_pp_baseline_ignores_a_per_group_reward_offset(rewards_P: list[list[float]]) -> None:
    """Adding a constant to one group's rewards changes nothing: the group mean absorbs it."""
    shifted = [[r + 3.0 * i for r in g] for i, g in enumerate(rewards_P)]
    a = reinforce_pp_baseline(_tensors(rewards_P), _lengths(rewards_P))
    b = reinforce_pp_baseline(_tensors(shifted), _lengths(shifted))
    for x, y in zip(a, b, strict=True):
        assert x.tolist() == pytest.approx(y.tolist(), abs=1e-4)


# -- the registry ----------------------------------------------------------------------------------


def test_registry_names_and_options() -> None:
    assert sorted(ADVANTAGE_ESTIMATORS) == ["dr_grpo", "grpo", "opo", "reinforce_pp", "reinforce_pp_baseline", "rloo"]
    assert estimator_options("grpo") == {"scale_rewards": "group"}
    assert all(estimator_options(name) == {} for name in ADVANTAGE_ESTIMATORS if name != "grpo")
    with pytest.raises(InvalidInputError, match=r"unknown advantage_estimator 'gae'.*grpo"):
        get_advantage_estimator("gae")
    with pytest.raises(InvalidInputError, match=r"does not take options \['scale_rewards'\]"):
        compute_advantages([single_turn_group([0.0, 1.0])], "rloo", {"scale_rewards": "group"})


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_every_estimator_returns_one_advantage_per_trajectory_in_group_order(name: str) -> None:
    groups = [single_turn_group([1.0, 0.0, 0.5]), single_turn_group([0.0, 2.0])]
    advantages = compute_advantages(groups, name)
    assert [len(a) for a in advantages] == [3, 2]
    # Higher reward within a group never gets a lower advantage (all are monotone in the reward).
    by_group: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for p, (group, a) in enumerate(zip(groups, advantages, strict=True)):
        by_group[p] = sorted(zip(group.get_total_rewards(), a.tolist(), strict=True))
        assert [adv for _, adv in by_group[p]] == sorted(adv for _, adv in by_group[p])
