"""BCO (`kto` recipe, `kto.loss_type: bco`) end to end: on the noop backend (wiring, metrics,
the running reward mean saved with each checkpoint and restored on resume), and learning on the
local backend's tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.engine.launch import RunDir, run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from recipes.data import shipped_data

BATCH = 4
NOOP = [
    "backend=noop",
    "kto.loss_type=bco",
    "data.max_steps=4",
    f"data.batch_size={BATCH}",
    "checkpoint.save_every=2",
    "eval.every=2",
    "data.max_length=64",
]


def _run(log_path: Path, *overrides: str) -> RunDir:
    recipe = get_recipe("kto")
    config = load_config(recipe.config_cls, None, [f"log_path={log_path}", *overrides])
    return run_recipe(recipe, config, progress=False)


def test_bco_runs_on_noop_and_checkpoints_its_running_mean(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", *NOOP)
    rows = read_metrics(run.metrics)
    train = [row for row in rows if "bco_loss" in row]
    assert len(train) == 4 and not any("kto_loss" in row or "kl" in row for row in rows)
    for row in train:
        assert row["num_desirable"] + row["num_undesirable"] == BATCH  # no mismatched pairs in a BCO batch
    evals = [row for row in rows if "eval/bco_loss" in row]
    assert [row["step"] for row in evals] == [1, 3]
    assert evals[-1]["eval/delta"] == pytest.approx(train[-1]["delta"])  # evaluation reads the mean as training left it
    records = read_records(run.checkpoints)
    means = {record.step: record.state["bco_running_mean"] for record in records}
    assert means[2]["count"] == 2 * BATCH and means[4]["count"] == 4 * BATCH
    assert means[4]["mean"] == pytest.approx(train[-1]["delta"])


def test_a_resumed_bco_run_goes_on_from_the_saved_mean(tmp_path: Path) -> None:
    log_path = tmp_path / "run"
    _run(log_path, *NOOP)
    lines = (log_path / "checkpoints.jsonl").read_text().splitlines()
    at_step_2 = next(json.loads(line) for line in lines if json.loads(line)["step"] == 2)
    at_step_2["state"]["bco_running_mean"] = {"mean": 123.0, "count": 1000}
    (log_path / "checkpoints.jsonl").write_text(json.dumps(at_step_2) + "\n")
    resumed = _run(log_path, *NOOP)
    final = read_records(resumed.checkpoints)[-1].state["bco_running_mean"]
    assert final["count"] == 1000 + 2 * BATCH  # restored, not started again
    assert final["mean"] > 100.0  # noop rewards are small; the saved mean dominates


def test_kto_weights_with_bco_are_a_config_error(tmp_path: Path) -> None:
    recipe = get_recipe("kto")
    with pytest.raises(ConfigError, match="desirable_weight / undesirable_weight are KTO's"):
        load_config(recipe.config_cls, None, [f"log_path={tmp_path}", "kto.loss_type=bco", "kto.desirable_weight=2"])


@pytest.mark.slow  # 10 steps of the tiny model per seed: 20-60 s on 2 cores
@pytest.mark.parametrize("seed", [0, 1])
def test_bco_learns_on_the_tiny_model(tmp_path: Path, seed: int) -> None:
    """The held-out reward margin (desirable minus undesirable mean `beta r`) grows from 0."""
    held_out = tmp_path / "held_out.jsonl"
    lines = Path(shipped_data("preference/polite_arithmetic_test.jsonl")).read_text(encoding="utf-8").splitlines()
    held_out.write_text("\n".join(lines[:24]) + "\n")
    run = _run(
        tmp_path / "run",
        "backend=local", "local.device=cpu", "renderer=role_colon", "checkpoint.save_every=0",
        "kto.loss_type=bco", f"seed={seed}", "data.max_steps=10", "eval.every=5", "data.batch_size=8",
        "data.max_length=64", f"data.eval_dataset={held_out}",
    )  # fmt: skip
    rows = read_metrics(run.metrics)
    first = next(row for row in rows if "bco_loss" in row)
    assert first["bco_loss"] == pytest.approx(0.6931471805599453, abs=1e-5)  # log 2: the policy is the reference
    evals = [row for row in rows if "eval/bco_loss" in row]
    assert len(evals) == 2
    assert evals[-1]["eval/reward_margin"] > evals[0]["eval/reward_margin"] > 0.0
    assert evals[-1]["eval/bco_loss"] < 0.69
