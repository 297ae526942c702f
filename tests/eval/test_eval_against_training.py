"""What `kitchen eval` measures on a final checkpoint equals what training measured on the same
weights and data: the supervised `eval/nll` and `eval/bits_per_byte` (also through the checkpoint exported as a Hugging
Face model folder), and DPO's held-out `eval/accuracy` and `eval/margin` (against the run's own
frozen reference, found through its checkpoint record)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kitchen.apps.cli import main
from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from recipes.data import shipped_data

pytestmark = pytest.mark.slow


def train(name: str, folder: Path, overrides: list[str]) -> tuple[Path, dict[str, float]]:
    recipe = get_recipe(name)
    config = load_config(recipe.config_cls, None, [f"log_path={folder}", *overrides])
    run = run_recipe(recipe, config, progress=False).path
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return run, next(row for row in reversed(rows) if any(key.startswith("eval/") for key in row))


def evaluate(args: list[str], out: Path) -> dict[str, float]:
    assert main(["eval", *args, "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    return {row["metric"]: row["value"] for row in results["results"]}


def test_nll_of_the_final_checkpoint_is_the_runs_last_eval_nll(tmp_path: Path) -> None:
    run, last = train(
        "sl_basic",
        tmp_path / "sl",
        ["data.max_steps=3", "eval.every=3", "checkpoint.save_every=100", "data.max_length=64"],
    )
    data = shipped_data("sl_basic/test.jsonl")
    measured = evaluate([str(run), "--tasks", f"nll:{data}", "nll.max_length=64"], tmp_path / "eval")
    assert measured["nll"] == pytest.approx(last["eval/nll"], abs=1e-4)
    assert measured["bits_per_byte"] == pytest.approx(last["eval/bits_per_byte"], abs=1e-4)
    # the same weights exported as a Hugging Face model folder are the same target
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    exported = evaluate([str(tmp_path / "hf"), "--tasks", f"nll:{data}", "nll.max_length=64"], tmp_path / "eval_hf")
    assert exported["nll"] == pytest.approx(measured["nll"], abs=1e-5)


def test_preference_accuracy_and_margin_are_the_dpo_runs_held_out_ones(tmp_path: Path) -> None:
    settings = [
        "data.max_steps=3",
        "eval.every=3",
        "checkpoint.save_every=100",
        "data.batch_size=8",
        "data.max_length=64",
    ]
    run, last = train("dpo", tmp_path / "dpo", settings)
    data = shipped_data("preference/polite_arithmetic_test.jsonl")
    measured = evaluate([str(run), "--tasks", f"preference:{data}", "preference.max_length=64"], tmp_path / "eval")
    assert last["eval/margin"] != 0.0  # three steps moved the policy off its reference
    assert measured["accuracy"] == pytest.approx(last["eval/accuracy"], abs=1e-6)
    assert measured["margin"] == pytest.approx(last["eval/margin"], abs=1e-4)
