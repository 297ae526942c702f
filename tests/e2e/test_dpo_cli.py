"""The DPO acceptance run, as docs/tutorials/dpo.md runs it: `kitchen run dpo --config recipes/configs/dpo.yaml`
on the embedded tiny model, offline, in under three minutes, to held-out accuracy >= 0.9."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from tests.helpers import run_cli


@pytest.mark.slow
def test_dpo_config_learns_the_held_out_preferences(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_cli("run", "dpo", f"log_path={tmp_path}", "--config", "recipes/configs/dpo.yaml", timeout=300)
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert seconds < 180, f"the DPO run took {seconds:.0f} s"
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert abs(rows[0]["dpo_loss"] - math.log(2)) < 1e-6
    evals = [row for row in rows if "eval/accuracy" in row]
    assert evals[-1]["step"] == rows[-1]["step"], "the last step is evaluated"
    assert evals[-1]["eval/accuracy"] >= 0.9, [row["eval/accuracy"] for row in evals]
    assert evals[-1]["eval/margin"] > evals[0]["eval/margin"] > 0
    assert evals[-1]["eval/dpo_loss"] < math.log(2)
    assert [r.name for r in read_records(tmp_path / "checkpoints.jsonl")][-1] == "final"
