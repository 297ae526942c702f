"""Acceptance (issue 14): `kitchen run code_rl` with its defaults (embedded tiny model, offline,
CPU, the bubblewrap or process sandbox) learns: the pass rate of the last 5 RL steps beats the
first 5 by at least 0.15."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.engine.runs.metrics import read_metrics
from tests.helpers import run_cli


@pytest.mark.slow
@pytest.mark.acceptance
def test_code_rl_defaults_learn(tmp_path: Path) -> None:
    result = run_cli("run", "code_rl", f"log_path={tmp_path}")
    assert result.returncode == 0, result.stderr
    passes = [row["env/all/pass"] for row in read_metrics(tmp_path / "metrics.jsonl")]
    assert len(passes) >= 10
    first, last = sum(passes[:5]) / 5, sum(passes[-5:]) / 5
    assert last - first >= 0.15, f"pass rate went from {first:.3f} to {last:.3f}"
