"""The RL algorithm settings and the `algorithm:` preset table: every preset names only known keys
with valid values, and each builds the train_core pieces it configures."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from kitchen.rl.algorithm_settings import RLAlgorithmSettings
from kitchen.rl.presets import ALGORITHM_NAMES, ALGORITHM_PRESETS
from kitchen.rl.settings import RLSettings
from train_core.rl.advantages import compute_advantages
from train_core.rl.dynamic_sampling import trajectory_batch_fill
from train_core.rl.overlong import default_buffer_tokens, overlong_penalty
from train_core.rl.policy_objective import PolicyObjective
from train_core.rl.types import Trajectory, TrajectoryGroup, Transition
from train_core.types import ModelInput, TokensWithLogprobs


class RLWithAlgorithm(RLSettings, RLAlgorithmSettings):
    """The RL settings as phase 2 will have them: the workflow's keys and the algorithm's."""


KNOWN_KEYS = set(RLWithAlgorithm.model_fields)


def single_turn_group(rewards: list[float]) -> TrajectoryGroup:
    """One-turn episodes (prompt [1], one action token) with these rewards."""
    turn = [Transition(ModelInput.from_ints([1]), TokensWithLogprobs([2], [-0.5]), r, True) for r in rewards]
    return TrajectoryGroup(
        [Trajectory([t], ModelInput.empty()) for t in turn], [0.0] * len(rewards), [{} for _ in rewards]
    )


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_every_preset_names_only_known_keys_with_valid_values(name: str) -> None:
    preset = ALGORITHM_PRESETS[name]
    assert preset.name == name and "arXiv:" in preset.source
    assert set(preset.settings) <= KNOWN_KEYS, set(preset.settings) - KNOWN_KEYS
    RLWithAlgorithm.model_validate(preset.settings)  # values checked by the settings' own validators


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_every_preset_builds_what_it_configures(name: str) -> None:
    config = RLWithAlgorithm.model_validate(ALGORITHM_PRESETS[name].settings)
    options = {"scale_rewards": config.scale_rewards} if config.scale_rewards else {}
    groups = [single_turn_group([1.0, 0.0, 0.5]), single_turn_group([0.0, 1.0])]
    advantages = compute_advantages(groups, config.advantage_estimator, options)
    assert all(bool(torch.isfinite(a).all()) and float(a.abs().sum()) > 0 for a in advantages)
    objective = PolicyObjective(
        config.loss_fn,
        config.loss_fn_config,
        config.loss_aggregation,
        config.loss_aggregation_tokens or config.max_tokens,
        config.kl_loss_coef,
        config.kl_loss_estimator,
        config.entropy_coeff,
    )
    # Only GRPO's KL term in the loss needs the custom route; the rest run the service's built-ins.
    assert bool(objective.custom_route_reasons(service=True)) == (name == "grpo")
    if config.dynamic_sampling is not None:
        assert trajectory_batch_fill(config.groups_per_batch, config.dynamic_sampling.max_rounds).missing() > 0
    if config.overlong_buffer is not None:
        buffer = config.overlong_buffer.tokens or default_buffer_tokens(config.max_tokens)
        assert overlong_penalty(config.max_tokens, config.max_tokens, buffer, config.overlong_buffer.penalty_factor) < 0


def test_defaults_keep_todays_training() -> None:
    defaults = RLWithAlgorithm()
    groups = [single_turn_group([1.0, 0.0, 0.0, 1.0])]
    (default,) = compute_advantages(groups, defaults.advantage_estimator)
    assert default.tolist() == [0.5, -0.5, -0.5, 0.5]
    objective = PolicyObjective(defaults.loss_fn, defaults.loss_fn_config, defaults.loss_aggregation)
    assert objective.custom_route_reasons(service=True) == []
    assert (defaults.dynamic_sampling, defaults.overlong_buffer, defaults.rollout_correction) == (None, None, None)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"advantage_estimator": "gae"}, "unknown advantage_estimator 'gae'"),
        (
            {"advantage_estimator": "rloo", "scale_rewards": "group"},
            "scale_rewards applies to advantage_estimator grpo",
        ),
        ({"kl_loss_estimator": "k4"}, "unknown KL estimator 'k4'"),
        ({"loss_aggregation": "seq_mean"}, "loss_aggregation"),
        (
            {"rollout_correction": {"mis": "token", "mis_high": 2.0, "mis_low": 3.0}},
            "mis needs 0 < mis_low <= mis_high",
        ),
        ({"dynamic_sampling": {"max_rounds": 0}}, "max_rounds"),
    ],
)
def test_bad_settings_fail_naming_the_key(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RLWithAlgorithm.model_validate(settings)


def test_verl_names_are_accepted_where_they_mean_the_same() -> None:
    assert RLWithAlgorithm.model_validate({"kl_loss_estimator": "low_var_kl"}).kl_loss_estimator == "low_var_kl"
    correction = RLWithAlgorithm.model_validate({"rollout_correction": {"tis": "token"}}).rollout_correction
    assert correction is not None and correction.correction().tis_cap == 2.0
