"""Acceptance: `kitchen run math_rl` with its defaults (embedded tiny model, offline, CPU) learns:
the sampled reward of the last 5 RL steps beats the first 5 by at least 0.2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from tests.helpers import run_cli


@pytest.mark.slow
@pytest.mark.acceptance
def test_math_rl_defaults_learn(tmp_path: Path) -> None:
    result = run_cli("run", "math_rl", f"log_path={tmp_path}")
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    rewards = [row["env/all/reward/total"] for row in rows]
    assert len(rewards) == 80
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last - first >= 0.2, f"reward went from {first:.3f} to {last:.3f}"
    evals = [row["eval/all/reward/total"] for row in rows if "eval/all/reward/total" in row]
    assert evals[-1] > evals[0] + 0.2
    assert rows[0]["optim/kl_sample_train_v2"] < 1e-3  # on-policy: sampler and trainer agree
    assert rows[0]["warm_start/nll_last"] < rows[0]["warm_start/nll_first"]
    transcript = json.loads((tmp_path / "rollouts" / "step_000079.jsonl").read_text().splitlines()[0])
    assert transcript["turns"][0]["observation"].startswith("User: What is ")
    assert [r.name for r in read_records(tmp_path / "checkpoints.jsonl")][-1] == "final"
