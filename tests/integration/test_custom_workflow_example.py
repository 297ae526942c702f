"""examples/custom_workflow.py runs on the noop backend, with its own stage's metric logged."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kitchen.engine.runs.metrics import read_metrics
from tests.helpers import REPO


def test_example_runs_on_noop(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("custom_workflow", REPO / "examples" / "custom_workflow.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run_dir = module.main(["backend=noop", "data.max_steps=5", f"log_path={tmp_path}"])
    rows = read_metrics(run_dir.metrics)
    assert len(rows) == 5
    assert all("filter/dropped" in row and "train_mean_nll" in row for row in rows)
    assert sum(row["filter/dropped"] for row in rows) > 0
