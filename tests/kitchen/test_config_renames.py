"""kitchen 0.2's flat config keys keep working for one release wherever a key can be given (YAML,
overrides, `@defaults`, `resume_allow_changes`, run directories written by 0.2), each use warned
with `ConfigKeyRenamed` naming the new key; the new layout loads the same config."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kitchen import ConfigKeyRenamed, OptimizerSettings, TrainingSettings, defaults
from kitchen.apps.cli import main
from kitchen.engine.config.loading import load_config
from kitchen.engine.config.renames import renames
from kitchen.engine.errors import ConfigError
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import configs_dir, get_recipe, recipe_names
from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from tests.helpers import REPO

RUNS_FROM_0_2 = Path(__file__).parent / "runs_from_0_2"


def _load(recipe: str, overrides: list[str], config_file: Path | None = None) -> Any:
    return load_config(get_recipe(recipe).config_cls, config_file, overrides)


CASES = {
    "sl_basic": (
        ["learning_rate=0.01", "batch_size=4", "eval_every=3"],
        ["optimizer.learning_rate=0.01", "data.batch_size=4", "eval.every=3"],
    ),
    "math_rl": (
        ["group_size=2", "warm_start_steps=0", "env=gsm8k", "dataset=x.jsonl"],
        ["rl.group_size=2", "warm_start.steps=0", "env=gsm8k", "env.dataset=x.jsonl"],
    ),
    "dpo": (
        ["dpo_beta=0.3", "wandb.project=p", "loggers=[tensorboard]"],
        ["dpo.beta=0.3", "logging.wandb.project=p", "logging.loggers=[tensorboard]"],
    ),
    "env_rl": (["env=guess_number", "env_args={max_turns: 3}"], ["env=guess_number", "env.max_turns=3"]),
    "code_rl": (["allow_unsafe_sandbox=true"], ["sandbox.allow_unsafe=true"]),
}


@pytest.mark.parametrize(("recipe", "old", "new"), [(name, *case) for name, case in CASES.items()])
def test_an_old_override_loads_the_same_config_with_a_warning_naming_the_new_key(
    recipe: str, old: list[str], new: list[str]
) -> None:
    with pytest.warns(ConfigKeyRenamed) as caught:
        from_old = _load(recipe, old)
    renamed = [override for override in old if not override.startswith("env=")]
    assert len(caught) == len(renamed)
    for override, warning in zip(renamed, caught, strict=True):
        old_key = override.split("=")[0]
        assert f"config key {old_key!r} is " in str(warning.message) and "until 0.4" in str(warning.message)
    assert from_old == _load(recipe, new)


def test_an_old_yaml_file_loads_with_a_warning_naming_the_file(tmp_path: Path) -> None:
    old = tmp_path / "old.yaml"
    old.write_text("learning_rate: 0.02\nwandb:\n  project: p\ngroup_size: 4\nwarm_start_steps: 1\n")
    with pytest.warns(ConfigKeyRenamed) as caught:
        config = _load("math_rl", [], old)
    assert [str(warning.message).split(" since ")[0] for warning in caught] == [
        f"{old}: config key 'learning_rate' is 'optimizer.learning_rate'",
        f"{old}: config key 'wandb' is 'logging.wandb'",
        f"{old}: config key 'group_size' is 'rl.group_size'",
        f"{old}: config key 'warm_start_steps' is 'warm_start.steps'",
    ]
    new = tmp_path / "new.yaml"
    new.write_text(
        "optimizer:\n  learning_rate: 0.02\nlogging:\n  wandb:\n    project: p\n"
        "rl:\n  group_size: 4\nwarm_start:\n  steps: 1\n"
    )
    assert config == _load("math_rl", [], new)


def test_a_key_no_release_had_is_still_unknown(tmp_path: Path) -> None:
    old = tmp_path / "old.yaml"
    old.write_text("learning_rate: 0.02\nmax_steps: 3\n")  # math_rl never had max_steps
    with pytest.warns(ConfigKeyRenamed), pytest.raises(ConfigError, match=rf"{old} line 2: unknown key 'max_steps'"):
        _load("math_rl", [], old)


def test_an_old_and_a_new_name_for_one_key_is_an_error(tmp_path: Path) -> None:
    both = tmp_path / "both.yaml"
    both.write_text("learning_rate: 0.02\noptimizer:\n  learning_rate: 0.03\n")
    with pytest.warns(ConfigKeyRenamed), pytest.raises(ConfigError, match="are the same key"):
        _load("sl_basic", [], both)


def test_every_shipped_config_and_every_recipe_default_uses_the_new_keys() -> None:
    for path in sorted(configs_dir().glob("*.yaml")):
        recipe = path.stem.split("_with_")[0]
        if recipe in recipe_names():
            _load(recipe, [], path)  # ConfigKeyRenamed is an error in the tests
    for name in recipe_names():
        _load(name, [])


def test_every_old_key_of_every_recipe_has_a_valid_new_place() -> None:
    for name in recipe_names():
        config_cls = get_recipe(name).config_cls
        table = renames(config_cls)
        assert table, name
        for old, new in table.items():
            assert (old != new and len(old) == 1) or old == ("env_args",), (name, old)
            assert new[0] in config_cls.model_fields, (name, old, new)


def test_recipe_defaults_by_an_old_name_are_warned_and_applied() -> None:
    with pytest.warns(ConfigKeyRenamed, match="'learning_rate' is 'optimizer.learning_rate'"):

        @defaults(learning_rate=0.5)
        class Old(TrainingSettings):
            pass

    @defaults(optimizer=OptimizerSettings(learning_rate=0.5))
    class New(TrainingSettings):
        pass

    assert Old().optimizer == New().optimizer and Old().optimizer.learning_rate == 0.5


def test_the_cli_warns_in_one_line_and_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kitchen.apps.cli", "validate", "sl_basic", "learning_rate=0.01"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    warning = "kitchen: warning: override 'learning_rate=0.01': config key 'learning_rate' is 'optimizer.learning_rate'"
    assert [line for line in result.stderr.splitlines() if line.startswith("kitchen: ")] == [
        warning + " since kitchen 0.3 (the old name works until 0.4)"
    ]
    assert "Traceback" not in result.stderr


# -- run directories written by kitchen 0.2 ------------------------------------------------------

# Each was made by kitchen 0.2 on the noop backend with the recipe's shipped config and these
# settings (0.2 names), then its absolute paths replaced by @REPO@ and @RUN_DIR@.
LEGACY = {
    "sl_basic": (["data.max_steps=6", "checkpoint.save_every=3", "eval.every=3"], "data.max_steps=8", 6, 8),
    "dpo": (["data.max_steps=4", "checkpoint.save_every=2", "eval.every=2"], "data.max_steps=6", 4, 6),
    "math_rl": (
        ["rl.num_batches=4", "checkpoint.save_every=2", "eval.every=2", "rl.groups_per_batch=4", "warm_start.steps=5"],
        "rl.num_batches=6",
        4,
        6,
    ),
}


def _legacy_run(tmp_path: Path, recipe: str) -> Path:
    run_dir = tmp_path / recipe
    shutil.copytree(RUNS_FROM_0_2 / recipe, run_dir)
    for name in ("config.yaml", "checkpoints.jsonl", "metrics.jsonl"):
        path = run_dir / name
        path.write_text(path.read_text().replace("@RUN_DIR@", str(run_dir)).replace("@REPO@", str(REPO)))
    return run_dir


def _resume(recipe: str, run_dir: Path, *overrides: str) -> Path:
    settings, *_ = LEGACY[recipe]
    given = ["backend=noop", f"log_path={run_dir}", *settings, *overrides]
    config = _load(recipe, given, configs_dir() / f"{recipe}.yaml")
    return run_recipe(get_recipe(recipe), config, progress=False).path


@pytest.mark.parametrize("recipe", sorted(LEGACY))
def test_a_run_written_by_kitchen_0_2_resumes_under_the_new_keys(tmp_path: Path, recipe: str) -> None:
    _, longer, done, total = LEGACY[recipe]
    run_dir = _legacy_run(tmp_path, recipe)
    before = read_metrics(run_dir / "metrics.jsonl")
    _resume(recipe, run_dir, longer)
    after = read_metrics(run_dir / "metrics.jsonl")
    assert [row["step"] for row in after] == list(range(total))  # the rest trained on from the 0.2 steps
    assert after[:done] == before[:done]
    final = [record for record in read_records(run_dir / "checkpoints.jsonl") if record.final][-1]
    assert final.step == total and "optimizer.learning_rate" in final.fingerprint


def test_a_0_2_run_still_refuses_a_changed_setting_by_its_new_name(tmp_path: Path) -> None:
    run_dir = _legacy_run(tmp_path, "sl_basic")
    with pytest.raises(ConfigError, match=r"optimizer\.learning_rate: 0\.003 -> 0\.01"):
        _resume("sl_basic", run_dir, "data.max_steps=8", "optimizer.learning_rate=0.01")
    with pytest.warns(ConfigKeyRenamed, match="'learning_rate' is 'optimizer.learning_rate'"):
        _resume(
            "sl_basic",
            run_dir,
            "data.max_steps=8",
            "optimizer.learning_rate=0.01",
            "resume_allow_changes=[learning_rate]",
        )
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")][-1] == 7


def test_a_key_added_since_a_run_was_recorded_counts_only_away_from_its_default(tmp_path: Path) -> None:
    """The 0.2 dpo run records no `dpo.ld_alpha` (added later): at its default the run resumes
    (the test above), set to anything else the resume is refused, naming it."""
    run_dir = _legacy_run(tmp_path, "dpo")
    with pytest.raises(ConfigError, match=r"dpo\.ld_alpha: '<unset>' -> 0\.5"):
        _resume("dpo", run_dir, "data.max_steps=6", "dpo.ld_alpha=0.5")


def test_kitchen_eval_reads_a_0_2_run_s_flat_sampling_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _legacy_run(tmp_path, "math_rl")
    assert main(["eval", str(run_dir), "--tasks", "arithmetic", "--limit", "2", "--samples", "1"]) == 0
    (folder,) = (run_dir / "evals").iterdir()
    task = json.loads((folder / "results.json").read_text())["config"]["tasks"]["arithmetic"]
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert "sampling" not in saved  # the keys are flat, as 0.2 wrote them
    assert (task["max_tokens"], task["temperature"]) == (saved["max_tokens"], saved["temperature"])
