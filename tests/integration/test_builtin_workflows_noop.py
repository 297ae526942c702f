"""Every built-in recipe's workflow runs end to end on the noop backend in seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.checkpoints import read_records
from kitchen.config import load_config
from kitchen.launch import run_recipe
from kitchen.metrics import read_metrics
from kitchen.recipe import get_recipe, recipe_names

# A few steps of each recipe; a recipe missing here fails test_every_recipe_is_covered.
SMOKE_OVERRIDES: dict[str, list[str]] = {
    "sl_basic": ["max_steps=6", "save_every=3", "eval_every=3", "batch_size=8"],
    "chat_sl": ["max_steps=4", "save_every=2", "eval_every=2", "batch_size=8"],
    "dpo": ["max_steps=4", "save_every=2", "eval_every=2", "batch_size=4", "max_length=64"],
    "math_rl": ["num_batches=4", "save_every=2", "eval_every=2", "warm_start_steps=2", "groups_per_batch=4"],
    "rlhf": [
        "sft.max_steps=2",
        "preference_model.max_steps=2",
        "preference_model.judge_eval_pairs=4",
        "rl.num_batches=2",
        "rl.groups_per_batch=2",
        "rl.group_size=3",
        "rl.win_rate_prompts=4",
    ],
    "guess_number": ["num_batches=4", "save_every=2", "eval_every=2", "warm_start_steps=2", "max_number=4"],
    # The shipped teacher is local weights; on noop the teachers are base models.
    "distill_on_policy": [
        "datasets=[{name: arithmetic, prompts: arithmetic}]",
        "num_batches=4",
        "save_every=2",
        "eval_every=2",
        "warm_start_steps=2",
        "groups_per_batch=4",
    ],
    "code_rl": [
        "num_batches=3",
        "save_every=2",
        "eval_every=2",
        "warm_start_steps=2",
        "groups_per_batch=2",
        "group_size=2",
        "max_tokens=16",
    ],
    "reward_fn_rl": ["num_batches=3", "save_every=2", "eval_every=2", "warm_start_steps=2", "groups_per_batch=4"],
    "distill_prompt": ["teacher.checkpoint=null", "max_steps=4", "save_every=2", "eval_every=2", "batch_size=8"],
}


def test_every_recipe_is_covered() -> None:
    assert sorted(SMOKE_OVERRIDES) == recipe_names()


@pytest.mark.parametrize("name", sorted(SMOKE_OVERRIDES))
def test_recipe_runs_on_noop(name: str, tmp_path: Path) -> None:
    recipe = get_recipe(name)
    config = load_config(recipe.config_cls, None, ["backend=noop", f"log_path={tmp_path}", *SMOKE_OVERRIDES[name]])
    run_dir = run_recipe(recipe, config, progress=False)
    rows = read_metrics(run_dir.metrics)
    assert rows, "no metrics were logged"
    assert [row["step"] for row in rows] == list(range(len(rows)))
    assert all(any(key.startswith("time/") for key in row) for row in rows)
    records = read_records(run_dir.checkpoints)
    assert records and records[-1].name == "final"
    assert (run_dir.path / "config.yaml").exists() and (run_dir.path / "events.jsonl").exists()
