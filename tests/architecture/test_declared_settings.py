"""Settings beside their readers: every settings section a stage reads is named by its `run`
signature, and building the workflow proves the recipe's config has that section (by type),
before any work (`kitchen validate` and `kitchen run`); that the stage reads only that section's
keys is mypy's to check (`test_stage_typing`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from kitchen import (
    CheckpointSettings,
    DataSettings,
    HeldOutEval,
    RendererSettings,
    TrainingSettings,
    WiringError,
    defaults,
    load_config,
    run_recipe,
    validate_recipe,
)
from kitchen.apps.cli import main
from kitchen.engine.recipe import Recipe
from kitchen.families.preference import preference_workflow
from kitchen.families.rl import (
    AlgorithmSettings,
    RLLoopSettings,
    RLSettings,
    WarmStartSettings,
    env_task,
    rl_workflow_for,
)
from kitchen.families.supervised import PromptCompletion, SupervisedSettings, supervised_workflow
from recipes.math_rl import ENVS


class NoDataSection(TrainingSettings):
    """The optimizer, checkpoint and eval sections only: no `data`."""


class NoDpoSections(TrainingSettings, RendererSettings):
    """Everything DPO needs but its own sections: a plain `data` section, no `dpo`."""

    data: DataSettings = Field(default_factory=lambda: DataSettings(dataset="unused.jsonl"))


class NoRLSections(TrainingSettings, RendererSettings):
    """What an RL recipe written against the training settings alone would have."""

    env: str = "arithmetic"


class RLShapeOnly(NoRLSections):
    """The sections the RL builder reads to pick the workflow's shape, and none the stages read."""

    rl: RLLoopSettings = Field(default_factory=RLLoopSettings)
    algorithm: AlgorithmSettings = Field(default_factory=AlgorithmSettings)
    warm_start: WarmStartSettings = Field(default_factory=WarmStartSettings)


CASES = [
    (
        Recipe("sl", "", NoDataSection, lambda c: supervised_workflow(PromptCompletion())),
        "stage 'load_supervised_data' reads settings DataSettings",
    ),
    (
        Recipe("dpo", "", NoDpoSections, lambda c: preference_workflow()),
        "stage 'load_preference_data' reads settings ComparisonData",
    ),
    (Recipe("rl", "", NoRLSections, rl_workflow_for(env_task(ENVS))), "workflow builder reads settings RLLoopSettings"),
    (Recipe("rl", "", RLShapeOnly, rl_workflow_for(env_task(ENVS))), "stage 'build_rl_task' reads settings RLSettings"),
]


@pytest.mark.parametrize(("recipe", "message"), CASES, ids=["supervised", "preference", "rl-builder", "rl"])
def test_a_config_lacking_a_section_a_stage_reads_fails_validation_naming_both(recipe: Recipe, message: str) -> None:
    config = recipe.config_cls()
    with pytest.raises(WiringError, match=f"{re.escape(message)}, which config class {recipe.config_cls.__name__}"):
        validate_recipe(recipe, config)


def test_a_section_of_another_type_is_no_section() -> None:
    class WrongType(SupervisedSettings):
        data: dict[str, Any] = Field(default_factory=dict)  # type: ignore[assignment]

    recipe = Recipe("sl", "", WrongType, lambda c: supervised_workflow(PromptCompletion()))
    with pytest.raises(WiringError, match=r"reads settings DataSettings, which config class WrongType does not have"):
        validate_recipe(recipe, WrongType())


def test_run_fails_on_it_before_any_work(tmp_path: Path) -> None:
    recipe, _ = CASES[3]
    with pytest.raises(WiringError, match="reads settings RLSettings"):
        run_recipe(recipe, recipe.config_cls(backend="noop", log_path=str(tmp_path / "run")), progress=False)
    assert not (tmp_path / "run").exists()


def test_predicates_declare_the_sections_they_read() -> None:
    workflow = supervised_workflow(PromptCompletion())
    readers = set(workflow.config_sections())
    assert ("when 'eval'", HeldOutEval) in readers and ("when 'checkpoint'", CheckpointSettings) in readers


def test_every_shipped_recipe_declares_only_sections_its_config_has() -> None:
    from kitchen.engine.recipe import get_recipe, recipe_names

    for name in recipe_names():
        recipe = get_recipe(name)
        config = recipe.config_cls()
        validate_recipe(recipe, config)  # raises on a missing section
        assert any(True for _ in recipe.workflow(config).config_sections())


def test_validate_refuses_an_unknown_renderer_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", "dpo", "renderer=nonexistent"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown renderer 'nonexistent'" in err and "Traceback" not in err
    assert main(["validate", "dpo", "renderer=qwen3_instrct"]) == 2
    assert "did you mean 'qwen3_instruct'?" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("win_rate.judge=polite_arithmetc", "unknown judge 'polite_arithmetc'; did you mean 'polite_arithmetic'?"),
        ("backend=nop", "unknown backend 'nop'; did you mean 'noop'?"),
    ],
)
def test_registered_names_are_checked_at_config_time(
    capsys: pytest.CaptureFixture[str], override: str, named: str
) -> None:
    assert main(["validate", "dpo", override]) == 2
    assert named in capsys.readouterr().err


def test_math_rl_loss_names_come_from_the_loss_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "math_rl", "algorithm.loss_fn=cross_entropy"]) == 2
    assert "cross_entropy is not a policy-gradient loss; RL needs one of importance_sampling" in capsys.readouterr().err


class Tuned(RLSettings):
    extra: int = Field(1, ge=0)


def test_defaults_of_a_section_change_only_the_keys_given_keeping_bounds_and_descriptions() -> None:
    from kitchen import OptimizerSettings

    tuned: Any = defaults(
        optimizer=OptimizerSettings(learning_rate=0.25), rl=RLLoopSettings(groups_per_batch=3), seed=7
    )(type("TunedAgain", (Tuned,), {}))
    config = tuned()
    assert config.optimizer.learning_rate == 0.25 and config.rl.groups_per_batch == 3 and config.seed == 7
    assert config.optimizer.lr_schedule == "constant" and config.rl.group_size == 8  # the others kept
    assert Tuned().rl.groups_per_batch == 16 and Tuned().optimizer.learning_rate == 1e-4
    assert tuned().optimizer is not config.optimizer  # each config its own section
    with pytest.raises(ValueError, match="greater than 0"):
        tuned(optimizer={"learning_rate": 0})
    with pytest.raises(ValueError, match="greater than 0"):
        defaults(optimizer={"learning_rate": 0})(type("Bad", (Tuned,), {}))
    with pytest.raises(TypeError, match="no config key 'learnin_rate'"):
        defaults(learnin_rate=1.0)(type("Bad", (Tuned,), {}))


def test_a_yaml_section_given_in_part_keeps_the_recipes_defaults_for_the_rest(tmp_path: Path) -> None:
    from recipes.math_rl import Config

    path = tmp_path / "part.yaml"
    path.write_text("optimizer:\n  warmup_steps: 5\nrl:\n  num_batches: 3\n")
    config = load_config(Config, path)
    assert config.optimizer.warmup_steps == 5 and config.optimizer.learning_rate == 1e-3  # math_rl's default kept
    assert config.rl.num_batches == 3 and config.rl.groups_per_batch == 32


@pytest.mark.parametrize(
    ("override", "moved_to"),
    [
        ("device=cpu", "local.device"),
        ("cpu_threads=2", "local.cpu_threads"),
        ("noop_latency.sample=0.1", "noop.latency"),
        ("base_url=https://example.invalid", "tinker.base_url"),
        ("rl.stream_minibatch.groups_per_batch=4", "rl.groups_per_batch"),
        ("rl.async_config.groups_per_batch=4", "rl.groups_per_batch"),
    ],
)
def test_a_moved_key_names_its_new_place(override: str, moved_to: str) -> None:
    from kitchen import ConfigError

    with pytest.raises(ConfigError, match=f"has moved: set '{moved_to}"):
        load_config(Tuned, None, [override])


def test_a_moved_key_in_yaml_names_file_and_line(tmp_path: Path) -> None:
    from kitchen.engine.errors import ConfigError

    path = tmp_path / "old.yaml"
    path.write_text("seed: 1\nrl:\n  async_config:\n    max_steps_off_policy: 1\n    groups_per_batch: 8\n")
    with pytest.raises(ConfigError, match=f"{path} line 5: key 'rl.async_config.groups_per_batch' has moved"):
        load_config(Tuned, path)
