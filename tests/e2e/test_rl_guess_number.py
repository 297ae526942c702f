"""Acceptance (multi-turn): `kitchen run guess_number` with its defaults (embedded tiny model,
offline, CPU) learns: the sampled win rate of the last 5 RL steps (640 games) beats the first 5's
by at least 0.1, and the evaluated win rate (every secret, 8 games each: 80 games) ends higher
than it starts.

Measured with the defaults on 2 CPU cores (2026-11-27), seeds 0, 1, 2: sampled 0.70 -> 0.84,
0.65 -> 0.92, 0.68 -> 0.92; evaluated 0.71 -> 0.80, 0.81 -> 0.86, 0.70 -> 0.94. The evaluated
rate of 80 games moves by several points between neighbouring evaluations by chance alone (a
standard error of about 0.045), so a fixed gain on it was a coin toss across machines (0.05 and
0.09 of the three seeds fell short of the 0.1 this test used to ask); the sampled rate over 640
games is the steady signal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kitchen.engine.runs.metrics import read_metrics
from tests.helpers import run_cli

SAMPLED_GAIN = 0.1


@pytest.mark.slow
@pytest.mark.acceptance
def test_guess_number_defaults_learn(tmp_path: Path) -> None:
    result = run_cli("run", "guess_number", f"log_path={tmp_path}")
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    rewards = [row["env/all/reward/total"] for row in rows]
    assert len(rewards) == 60
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last - first >= SAMPLED_GAIN, f"sampled win rate went from {first:.3f} to {last:.3f}"
    evals = [row["eval/all/won"] for row in rows if "eval/all/won" in row]
    assert evals[-1] > evals[0], f"evaluated win rate went {evals}"
    assert rows[0]["optim/kl_sample_train_v2"] < 1e-3
    assert all(row["env/all/turns_per_episode"] > 1 for row in rows)
    games = [json.loads(line) for line in (tmp_path / "rollouts" / "step_000059.jsonl").read_text().splitlines()]
    assert any(
        len(game["turns"]) > 1 and game["turns"][1]["observation"].rstrip().endswith("Assistant:") for game in games
    )
