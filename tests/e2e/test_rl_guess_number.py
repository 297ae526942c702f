"""Acceptance (multi-turn): `kitchen run guess_number` with its defaults (embedded tiny model,
offline, CPU) learns: the evaluated win rate (every secret, 8 games each) rises by at least 0.1,
and the sampled win rate of the last 5 RL steps does not fall below the first 5's.

Measured with the defaults (2026-11-25): evaluated 0.625 -> 0.825, sampled 0.72 -> 0.77. The
sampled rate of 5 steps is the noisier signal: float rounding alone (the chunked scoring of the
final hidden states against the whole logits) moves it by several points."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kitchen.engine.runs.metrics import read_metrics
from tests.helpers import run_cli

EVAL_GAIN = 0.1


@pytest.mark.slow
@pytest.mark.acceptance
def test_guess_number_defaults_learn(tmp_path: Path) -> None:
    result = run_cli("run", "guess_number", f"log_path={tmp_path}")
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    rewards = [row["env/all/reward/total"] for row in rows]
    assert len(rewards) == 60
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last >= first, f"sampled win rate went from {first:.3f} to {last:.3f}"
    evals = [row["eval/all/won"] for row in rows if "eval/all/won" in row]
    assert evals[-1] - evals[0] >= EVAL_GAIN, f"evaluated win rate went {evals}"
    assert rows[0]["optim/kl_sample_train_v2"] < 1e-3
    assert all(row["env/all/turns_per_episode"] > 1 for row in rows)
    games = [json.loads(line) for line in (tmp_path / "rollouts" / "step_000059.jsonl").read_text().splitlines()]
    assert any(
        len(game["turns"]) > 1 and game["turns"][1]["observation"].rstrip().endswith("Assistant:") for game in games
    )
