from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.engine.launch import RunDir
from tests.preference_workflow.dpo_runs import RunDpo, run_dpo_recipe


@pytest.fixture
def run_dpo(tmp_path: Path) -> RunDpo:
    """`run_dpo(*overrides, log_path=...)` runs the dpo recipe (default log_path: tmp_path/run)."""

    def run(*overrides: str, log_path: Path | None = None) -> RunDir:
        return run_dpo_recipe(log_path or tmp_path / "run", overrides)

    return run
