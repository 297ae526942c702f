"""End to end on the embedded tiny model (slow): the preference model learns the polite_arithmetic
rule, and RL on its tournament rewards beats the SFT policy by the rule judge's verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics


@pytest.mark.slow
def test_rlhf_on_the_tiny_model(tmp_path: Path) -> None:
    """Three seeds, their mean win rate asserted: one 25-step RL run of the tiny model is chaotic
    under float rounding. Seeds 0-3 gave 0.73, 0.71, 0.80, 0.68 with the packing of 2026-11-26,
    0.65, 0.72, 0.78, 0.64 with prefix trees and 0.57, 0.70, 0.73, 0.69 with the whole prefix trie
    (each packing's logprobs agree within 1e-5): over those 12 runs a run's win rate has a mean of
    0.70 and a spread of 0.06, so a mean of three under 0.6 is a 2.7-sigma event."""
    recipe = get_recipe("rlhf")
    win_rates = []
    for seed in (0, 1, 2):
        run = tmp_path / f"seed-{seed}"
        config = load_config(
            recipe.config_cls,
            None,
            # the shipped defaults (both-ways tournaments, a gentle learning rate and 25 RL steps: a
            # longer one-way phase collapsed the policy onto one reply the learned judge liked);
            # intermediate win-rate evaluations off
            [f"log_path={run}", "rl.eval.every=0", f"seed={seed}"],
        )
        run_recipe(recipe, config, progress=False)
        pm = [row for row in read_metrics(run / "preference_model" / "metrics.jsonl") if "eval/judge_accuracy" in row]
        assert pm[-1]["eval/judge_accuracy"] >= 0.9
        assert abs(pm[-1]["eval/judge_position_bias"]) < 0.2
        final = read_metrics(run / "rl" / "metrics.jsonl")[-1]
        assert final["eval/win_rate"] > 0.5, final  # each run beats the SFT policy
        assert read_records(run / "rl" / "checkpoints.jsonl")[-1].name == "final"
        win_rates.append(final["eval/win_rate"])
    assert sum(win_rates) / len(win_rates) >= 0.6, win_rates
