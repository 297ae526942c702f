"""Every shipped RL config (and the GSM8K-format env) runs a few steps on the noop backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import configs_dir, get_recipe
from kitchen.engine.runs.metrics import read_metrics

SHORT = [
    "backend=noop",
    "rl.num_batches=2",
    "warm_start.steps=2",
    "eval.every=1",
    "checkpoint.save_every=1",
    "rl.groups_per_batch=4",
]
CONFIGS = sorted(p.name for p in configs_dir().glob("*.yaml") if p.name.startswith(("math_rl", "guess_number")))


@pytest.mark.parametrize("name", CONFIGS)
def test_shipped_config_runs_on_noop(tmp_path: Path, name: str) -> None:
    recipe = get_recipe("guess_number" if name.startswith("guess_number") else "math_rl")
    overrides = [*SHORT, f"log_path={tmp_path}"]
    config = load_config(recipe.config_cls, configs_dir() / name, overrides)
    rows = read_metrics(run_recipe(recipe, config, progress=False).metrics)
    assert [row["step"] for row in rows] == [0, 1]
    assert all("env/all/reward/total" in row and "eval/all/reward/total" in row for row in rows)


def test_gsm8k_env_tags_its_metrics(tmp_path: Path) -> None:
    recipe = get_recipe("math_rl")
    config = load_config(
        recipe.config_cls, None, [*SHORT, "env=gsm8k", "sampling.max_tokens=16", f"log_path={tmp_path}"]
    )
    rows = read_metrics(run_recipe(recipe, config, progress=False).metrics)
    assert all("env/gsm8k/reward/total" in row and "eval/gsm8k/correct" in row for row in rows)
    assert rows[0]["eval/all/total_episodes"] == 8 * 8  # the shipped test split: 8 problems x group_size 8
