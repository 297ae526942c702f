"""Settings beside their readers: every config key a stage reads is a field of the settings model
its `run` names, checked against the recipe's config class before any work (`kitchen validate`
and `kitchen run`); that the stage reads only those fields is mypy's to check
(`test_stage_typing`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import Field

from kitchen.apps.cli import main
from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import WiringError
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import Recipe
from kitchen.engine.validation import validate_recipe
from kitchen.families.common.settings import DatasetSettings, OptimizerSettings, RendererSettings
from kitchen.families.preference.workflow import preference_workflow
from kitchen.families.rl.settings import RLSettings
from kitchen.families.rl.workflow import rl_workflow_for
from kitchen.families.supervised.examples import PromptCompletion
from kitchen.families.supervised.settings import SupervisedSettings
from kitchen.families.supervised.workflow import supervised_workflow
from recipes.math_rl import build_task


class NoDataKeys(OptimizerSettings):
    """Optimizer keys only: the supervised stages' data keys are missing."""


class NoDpoKeys(DatasetSettings, RendererSettings, OptimizerSettings):
    """Everything DPO needs but its own keys."""

    dataset: str = "unused.jsonl"


class NoRLKeys(RendererSettings, OptimizerSettings):
    """What an RL recipe written against the bare optimizer settings would have."""

    env: str = "arithmetic"


class RLShapeOnly(NoRLKeys):
    """The keys the RL builder reads to pick the workflow's shape, and none the stages read."""

    warm_start_steps: int = 0
    kl_penalty_coef: float = 0.0
    kl_loss_coef: float = 0.0
    dynamic_sampling: None = None

    @property
    def mode(self) -> str:
        return "sync"


CASES = [
    (
        Recipe("sl", "", NoDataKeys, lambda c: supervised_workflow(PromptCompletion())),
        "stage 'load_supervised_data' needs setting 'dataset' (DatasetSettings)",
    ),
    (
        Recipe("dpo", "", NoDpoKeys, lambda c: preference_workflow()),
        "stage 'load_preference_data' needs setting 'dataset_layout' (PreferenceSettings)",
    ),
    (Recipe("rl", "", NoRLKeys, rl_workflow_for(build_task)), "workflow builder reads config key 'mode'"),
    (Recipe("rl", "", RLShapeOnly, rl_workflow_for(build_task)), "stage 'build_rl_task' needs setting 'algorithm'"),
]


@pytest.mark.parametrize(("recipe", "message"), CASES, ids=["supervised", "preference", "rl-builder", "rl"])
def test_a_config_lacking_a_key_a_stage_reads_fails_validation_naming_both(recipe: Recipe, message: str) -> None:
    config = recipe.config_cls()
    with pytest.raises(WiringError, match=f"{re.escape(message)}.*which config class {recipe.config_cls.__name__}"):
        validate_recipe(recipe, config)


def test_a_setting_of_another_type_fails_validation_naming_both_types() -> None:
    class WrongType(SupervisedSettings):
        batch_size: str = "32"  # type: ignore[assignment]

    recipe = Recipe("sl", "", WrongType, lambda c: supervised_workflow(PromptCompletion()))
    with pytest.raises(WiringError, match=r"reads setting 'batch_size' as int .*declares it as str"):
        validate_recipe(recipe, WrongType(dataset="x.jsonl"))


def test_run_fails_on_it_before_any_work(tmp_path: Path) -> None:
    recipe, _ = CASES[3]
    with pytest.raises(WiringError, match="needs setting 'algorithm'"):
        run_recipe(recipe, recipe.config_cls(backend="noop", log_path=str(tmp_path / "run")), progress=False)
    assert not (tmp_path / "run").exists()


def test_predicates_declare_the_keys_they_read() -> None:
    class NoEvalEvery(SupervisedSettings):
        pass

    workflow = supervised_workflow(PromptCompletion())
    readers = set(workflow.config_keys())
    assert ("when 'eval'", "eval_every") in readers and ("when 'checkpoint'", "save_every") in readers
    assert not NoEvalEvery.model_fields.keys() - SupervisedSettings.model_fields.keys()


def test_every_shipped_recipe_declares_only_keys_its_config_has() -> None:
    from kitchen.engine.recipe import get_recipe, recipe_names

    for name in recipe_names():
        recipe = get_recipe(name)
        config = recipe.config_cls()
        validate_recipe(recipe, config)  # raises on a missing key
        assert any(key for _, key in recipe.workflow(config).config_keys())


def test_validate_refuses_an_unknown_renderer_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", "dpo", "renderer=nonexistent"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown renderer 'nonexistent'" in err and "Traceback" not in err
    assert main(["validate", "dpo", "renderer=qwen3_instrct"]) == 2
    assert "did you mean 'qwen3_instruct'?" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("win_rate_judge=polite_arithmetc", "unknown judge 'polite_arithmetc'; did you mean 'polite_arithmetic'?"),
        ("backend=nop", "unknown backend 'nop'; did you mean 'noop'?"),
    ],
)
def test_registered_names_are_checked_at_config_time(
    capsys: pytest.CaptureFixture[str], override: str, named: str
) -> None:
    assert main(["validate", "dpo", override]) == 2
    assert named in capsys.readouterr().err


def test_math_rl_loss_names_come_from_the_loss_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "math_rl", "loss_fn=cross_entropy"]) == 2
    assert "cross_entropy is not a policy-gradient loss; RL needs one of importance_sampling" in capsys.readouterr().err


class Tuned(RLSettings):
    extra: int = Field(1, ge=0)


def test_defaults_override_inherited_keys_keeping_their_bounds_and_description() -> None:
    from kitchen.engine.config.loading import defaults

    tuned: type[Tuned] = defaults(learning_rate=0.25, groups_per_batch=3)(type("TunedAgain", (Tuned,), {}))
    assert tuned().learning_rate == 0.25 and tuned().groups_per_batch == 3 and Tuned().groups_per_batch == 16
    assert tuned.model_fields["groups_per_batch"].description == RLSettings.model_fields["groups_per_batch"].description
    with pytest.raises(ValueError, match="greater than 0"):
        tuned(learning_rate=0)
    with pytest.raises(TypeError, match="no config key 'learnin_rate'"):
        defaults(learnin_rate=1.0)(type("Bad", (Tuned,), {}))


@pytest.mark.parametrize(
    ("override", "moved_to"),
    [
        ("device=cpu", "local.device"),
        ("cpu_threads=2", "local.cpu_threads"),
        ("noop_latency.sample=0.1", "noop.latency"),
        ("base_url=https://example.invalid", "tinker.base_url"),
        ("stream_minibatch.groups_per_batch=4", "groups_per_batch"),
        ("async_config.groups_per_batch=4", "groups_per_batch"),
    ],
)
def test_a_moved_key_names_its_new_place(override: str, moved_to: str) -> None:
    from kitchen.engine.errors import ConfigError

    with pytest.raises(ConfigError, match=f"has moved: set '{moved_to}"):
        load_config(Tuned, None, [override])


def test_a_moved_key_in_yaml_names_file_and_line(tmp_path: Path) -> None:
    from kitchen.engine.errors import ConfigError

    path = tmp_path / "old.yaml"
    path.write_text("seed: 1\nasync_config:\n  max_steps_off_policy: 1\n  groups_per_batch: 8\n")
    with pytest.raises(ConfigError, match=f"{path} line 4: key 'async_config.groups_per_batch' has moved"):
        load_config(Tuned, path)
