"""The main job, as the README runs it: `kitchen run sl_basic` on the embedded tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from tests.helpers import run_cli


@pytest.mark.slow
def test_sl_basic_learns_through_the_cli(tmp_path: Path) -> None:
    result = run_cli("run", "sl_basic", f"log_path={tmp_path}")
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    first, last = rows[0]["train_mean_nll"], rows[-1]["train_mean_nll"]
    assert last <= 0.7 * first, f"train NLL fell only from {first:.3f} to {last:.3f}"
    evals = [row["eval/nll"] for row in rows if "eval/nll" in row]
    assert len(evals) >= 2 and evals[-1] < evals[0]
    assert [r.name for r in read_records(tmp_path / "checkpoints.jsonl")][-1] == "final"
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["model_name"] == "tiny"
    assert f"run finished: {tmp_path}" in result.stdout
