"""The RL algorithm settings and the `algorithm:` preset table: every preset names only known keys
with valid values and builds the train_core pieces it configures; the config loader applies a
preset between the recipe's defaults and the YAML; `kitchen show` prints the resolved values."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from kitchen.apps.cli import main
from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.families.rl.presets import ALGORITHM_NAMES, ALGORITHM_PRESETS
from kitchen.families.rl.settings import RLSettings
from recipes.math_rl import Config as MathConfig
from train_core.rl.advantages import compute_advantages
from train_core.rl.dynamic_sampling import trajectory_batch_fill
from train_core.rl.overlong import default_buffer_tokens, overlong_penalty
from train_core.rl.policy_objective import PolicyObjective
from train_core.rl.types import Trajectory, TrajectoryGroup, Transition
from train_core.types import ModelInput, TokensWithLogprobs

RLWithAlgorithm = RLSettings
"""The RL settings hold the workflow's keys and the algorithm's."""


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
    objective = config.policy_objective()
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


# -- applied by the config loader: recipe defaults < preset < YAML < key=value -----------------


def test_a_preset_overrides_the_recipes_defaults_and_keeps_the_rest() -> None:
    config = load_config(MathConfig, None, ["algorithm=dapo"])
    assert (config.loss_fn, config.loss_aggregation, config.advantage_estimator) == ("ppo", "token_mean", "grpo")
    assert config.policy_loss_config() == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28}
    assert config.learning_rate == MathConfig().learning_rate  # a recipe default the preset does not set
    assert load_config(MathConfig, None, []).loss_fn == MathConfig().loss_fn == "importance_sampling"


def test_yaml_overrides_the_preset_and_merges_its_sections(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("algorithm: dapo\nloss_aggregation: seq_mean_token_mean\noverlong_buffer:\n  tokens: 2\n")
    config = load_config(MathConfig, path)
    assert config.loss_aggregation == "seq_mean_token_mean"
    assert config.overlong_buffer is not None and config.overlong_buffer.tokens == 2
    assert config.dynamic_sampling is not None and config.dynamic_sampling.max_rounds == 10  # still the preset's


def test_key_value_overrides_the_yaml_and_picks_the_preset(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("algorithm: dapo\nloss_aggregation: seq_mean_token_mean\n")
    config = load_config(MathConfig, path, ["algorithm=dr_grpo", "clip_ratio_high=0.3"])
    assert config.algorithm == "dr_grpo" and config.dynamic_sampling is None  # dr_grpo's preset, not dapo's
    assert config.loss_aggregation == "seq_mean_token_mean"  # the YAML still wins over the preset
    assert config.policy_loss_config() == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.3}


def test_overrides_never_write_into_the_preset_table() -> None:
    load_config(MathConfig, None, ["algorithm=dapo", "dynamic_sampling.max_rounds=2"])
    assert ALGORITHM_PRESETS["dapo"].settings["dynamic_sampling"] == {"max_rounds": 10}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm=ppo"], "override 'algorithm=ppo': algorithm: Input should be 'grpo'"),
        (["loss_fn=ppo", "loss_fn_config.clip_high_threshold=1.3", "clip_ratio_high=0.2"], "set the same clip"),
        (["loss_fn=cispo", "clip_ratio_c=3"], "does not accept loss_fn_config keys \\['clip_ratio_c'\\]"),
        (["overlong_buffer.tokens=9"], "overlong_buffer.tokens \\(9\\) must be at most max_tokens \\(8\\)"),
        (["loss_fn=dro", "loss_fn_config.beta=0.1", "rollout_correction.tis=token"], "scaled by the advantages"),
    ],
)
def test_bad_combinations_fail_when_the_config_loads(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(MathConfig, None, overrides)


def test_show_prints_the_resolved_algorithm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "math_rl", "algorithm=gspo", "clip_ratio_low=0.001"]) == 0
    out = capsys.readouterr().out
    assert "algorithm: gspo (Zheng et al. 2025" in out
    assert "  loss_fn = gspo" in out and "  scale_rewards = group" in out
    assert "'clip_low_threshold': 0.999, 'clip_high_threshold': 1.0004" in out


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        (["algorithm=grpo"], None),  # KL in the loss: the custom route, which the service runs
        (["loss_fn=decoupled_ppo"], None),  # kitchen's own loss: the custom route too
        (["entropy_coeff=0.01"], "does not hand a custom loss the policy's per-token entropies"),
    ],
)
def test_validate_on_the_tinker_service_knows_the_custom_route(
    overrides: list[str], error: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["validate", "math_rl", "backend=tinker", "lora_rank=8", *overrides])
    assert code == (0 if error is None else 2)
    if error is not None:
        assert error in capsys.readouterr().err
