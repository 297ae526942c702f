"""End to end on the embedded tiny model (slow): the preference model learns the polite_arithmetic
rule, and RL on its tournament rewards beats the SFT policy by the rule judge's verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.checkpoints import read_records
from kitchen.config import load_config
from kitchen.launch import run_recipe
from kitchen.metrics import read_metrics
from kitchen.recipe import get_recipe


@pytest.mark.slow
def test_rlhf_on_the_tiny_model(tmp_path: Path) -> None:
    recipe = get_recipe("rlhf")
    config = load_config(
        recipe.config_cls,
        None,
        # the shipped defaults (both-ways tournaments, a gentle learning rate and 25 RL steps: a
        # longer one-way phase collapsed the policy onto one reply the learned judge liked);
        # intermediate win-rate evaluations off
        [f"log_path={tmp_path}", "rl.eval_every=0"],
    )
    run_recipe(recipe, config, progress=False)
    pm = [row for row in read_metrics(tmp_path / "preference_model" / "metrics.jsonl") if "eval/judge_accuracy" in row]
    assert pm[-1]["eval/judge_accuracy"] >= 0.9
    assert abs(pm[-1]["eval/judge_position_bias"]) < 0.2
    final = read_metrics(tmp_path / "rl" / "metrics.jsonl")[-1]
    assert final["eval/win_rate"] >= 0.65
    assert final["eval/win_rate"] - 2 * final["eval/win_rate_stderr"] > 0.5
    assert read_records(tmp_path / "rl" / "checkpoints.jsonl")[-1].name == "final"
