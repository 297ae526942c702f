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
from kitchen.families.rl import AlgorithmSettings
from kitchen.families.rl.presets import ALGORITHM_NAMES, ALGORITHM_PRESETS
from recipes.math_rl import Config as MathConfig
from train_core.rl.data_processing import compute_advantages
from train_core.rl.dynamic_sampling import trajectory_batch_fill
from train_core.rl.overlong import default_buffer_tokens, overlong_penalty
from train_core.rl.policy_objective import PolicyObjective
from train_core.rl.types import Trajectory, TrajectoryGroup, Transition
from train_core.types import ModelInput, TokensWithLogprobs

KNOWN_KEYS = set(AlgorithmSettings.model_fields)
"""A preset sets keys of the `algorithm` section."""
MAX_TOKENS = 16
"""The `sampling.max_tokens` the objectives are built for (RL's default)."""
GROUPS_PER_BATCH = 16


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
    AlgorithmSettings.model_validate(preset.settings)  # values checked by the section's own validators


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_every_preset_builds_what_it_configures(name: str) -> None:
    config = AlgorithmSettings.model_validate(ALGORITHM_PRESETS[name].settings)
    options = {"scale_rewards": config.scale_rewards} if config.scale_rewards else {}
    groups = [single_turn_group([1.0, 0.0, 0.5]), single_turn_group([0.0, 1.0])]
    advantages = compute_advantages(groups, config.advantage_estimator, options)
    assert all(bool(torch.isfinite(a).all()) and float(a.abs().sum()) > 0 for a in advantages)
    objective = config.policy_objective(MAX_TOKENS)
    # Only GRPO's KL term in the loss and SAPO's and VESPO's losses (kitchen's own) need the
    # custom route; the rest run the service's built-ins.
    assert bool(objective.custom_route_reasons(service=True)) == (name in ("grpo", "sapo", "vespo"))
    if config.dynamic_sampling is not None:
        assert trajectory_batch_fill(GROUPS_PER_BATCH, config.dynamic_sampling.max_rounds).missing() > 0
    if config.overlong_buffer is not None:
        buffer = config.overlong_buffer.tokens or default_buffer_tokens(MAX_TOKENS)
        assert overlong_penalty(MAX_TOKENS, MAX_TOKENS, buffer, config.overlong_buffer.penalty_factor) < 0


def test_defaults_keep_todays_training() -> None:
    defaults = AlgorithmSettings()
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
        AlgorithmSettings.model_validate(settings)


def test_verl_names_are_accepted_where_they_mean_the_same() -> None:
    assert AlgorithmSettings.model_validate({"kl_loss_estimator": "low_var_kl"}).kl_loss_estimator == "low_var_kl"
    correction = AlgorithmSettings.model_validate({"rollout_correction": {"tis": "token"}}).rollout_correction
    assert correction is not None and correction.correction().tis_cap == 2.0


# -- applied by the config loader: recipe defaults < preset < YAML < key=value -----------------


def test_a_preset_overrides_the_recipes_defaults_and_keeps_the_rest() -> None:
    config = load_config(MathConfig, None, ["algorithm=dapo"])
    algorithm = config.algorithm
    assert (algorithm.loss_fn, algorithm.loss_aggregation, algorithm.advantage_estimator) == (
        "ppo",
        "token_mean",
        "grpo",
    )
    assert algorithm.policy_loss_config() == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28}
    assert config.optimizer.learning_rate == MathConfig().optimizer.learning_rate  # a default the preset keeps
    assert (
        load_config(MathConfig, None, []).algorithm.loss_fn == MathConfig().algorithm.loss_fn == "importance_sampling"
    )


def test_yaml_overrides_the_preset_and_merges_its_sections(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "algorithm:\n  preset: dapo\n  loss_aggregation: seq_mean_token_mean\n  overlong_buffer:\n    tokens: 2\n"
    )
    algorithm = load_config(MathConfig, path).algorithm
    assert algorithm.loss_aggregation == "seq_mean_token_mean"
    assert algorithm.overlong_buffer is not None and algorithm.overlong_buffer.tokens == 2
    assert algorithm.dynamic_sampling is not None and algorithm.dynamic_sampling.max_rounds == 10  # the preset's


def test_key_value_overrides_the_yaml_and_picks_the_preset(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("algorithm:\n  preset: dapo\n  loss_aggregation: seq_mean_token_mean\n")
    config = load_config(MathConfig, path, ["algorithm.preset=dr_grpo", "algorithm.clip_ratio_high=0.3"])
    algorithm = config.algorithm
    assert algorithm.preset == "dr_grpo" and algorithm.dynamic_sampling is None  # dr_grpo's preset, not dapo's
    assert algorithm.loss_aggregation == "seq_mean_token_mean"  # the YAML still wins over the preset
    assert algorithm.policy_loss_config() == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.3}


def test_overrides_never_write_into_the_preset_table() -> None:
    load_config(MathConfig, None, ["algorithm.preset=dapo", "algorithm.dynamic_sampling.max_rounds=2"])
    assert ALGORITHM_PRESETS["dapo"].settings["dynamic_sampling"] == {"max_rounds": 10}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.preset=ppo"], "override 'algorithm.preset=ppo': algorithm.preset: Input should be 'grpo'"),
        (
            [
                "algorithm.loss_fn=ppo",
                "algorithm.loss_fn_config.clip_high_threshold=1.3",
                "algorithm.clip_ratio_high=0.2",
            ],
            "set the same clip",
        ),
        (
            ["algorithm.loss_fn=cispo", "algorithm.clip_ratio_c=3"],
            "does not accept loss_fn_config keys \\['clip_ratio_c'\\]",
        ),
        (
            ["algorithm.overlong_buffer.tokens=9"],
            "overlong_buffer.tokens \\(9\\) must be at most sampling.max_tokens \\(8\\)",
        ),
        (
            ["algorithm.loss_fn=dro", "algorithm.loss_fn_config.beta=0.1", "algorithm.rollout_correction.tis=token"],
            "scaled by the advantages",
        ),
    ],
)
def test_bad_combinations_fail_when_the_config_loads(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(MathConfig, None, overrides)


def test_show_prints_the_resolved_algorithm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "math_rl", "algorithm.preset=gspo", "algorithm.clip_ratio_low=0.001"]) == 0
    out = capsys.readouterr().out
    assert "algorithm: gspo (Zheng et al. 2025" in out
    assert "  algorithm.loss_fn = gspo" in out and "  algorithm.scale_rewards = group" in out
    assert "'clip_low_threshold': 0.999, 'clip_high_threshold': 1.0004" in out


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        (["algorithm.preset=grpo"], None),  # KL in the loss: the custom route, which the service runs
        (["algorithm.loss_fn=decoupled_ppo"], None),  # kitchen's own loss: the custom route too
        (["algorithm.entropy_coeff=0.01"], "does not hand a custom loss the policy's per-token entropies"),
    ],
)
def test_validate_on_the_tinker_service_knows_the_custom_route(
    overrides: list[str], error: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["validate", "math_rl", "backend=tinker", "lora_rank=8", *overrides])
    assert code == (0 if error is None else 2)
    if error is not None:
        assert error in capsys.readouterr().err
