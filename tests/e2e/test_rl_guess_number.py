"""Acceptance (multi-turn): `kitchen run guess_number` with its defaults (embedded tiny model,
offline, CPU) learns at every one of three seeds: the evaluated win rate (every secret,
`env.eval_games` games each) rises by at least 0.1, the mean rise over the seeds is at least
twice that, and the sampled win rate of the last 5 RL steps does not fall below the first 5's.

The three runs go side by side (one torch thread each, the embedded model's default). Measured
with the defaults (2026-11-28, 2 CPU cores): evaluated win rate 0.703 -> 0.934, 0.759 -> 0.963,
0.675 -> 0.909 at seeds 0, 1, 2 (gains 0.23, 0.20, 0.23; mean 0.22)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import SeedRun, SeedRunner, SeedRuns, evaluated, evaluated_gain

EVAL_GAIN = 0.1
SEEDS = (0, 1, 2)
SEED_RUNS = SeedRuns("guess_number", SEEDS, cpu_seconds=70)


@pytest.fixture(scope="module")
def runs(seed_runner: SeedRunner) -> dict[int, SeedRun]:
    return seed_runner.results(SEED_RUNS)


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.parametrize("seed", SEEDS)
def test_guess_number_defaults_learn(runs: dict[int, SeedRun], seed: int) -> None:
    log_path, rows = runs[seed]
    rewards = [row["env/all/reward/total"] for row in rows]
    assert len(rewards) == 80
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last >= first, f"sampled win rate went from {first:.3f} to {last:.3f}"
    evals = evaluated(rows, "eval/all/won")
    assert evaluated_gain(rows, "eval/all/won") >= EVAL_GAIN, f"evaluated win rate went {evals}"
    assert rows[0]["optim/kl_sample_train_v2"] < 1e-3
    assert all(row["env/all/turns_per_episode"] > 1 for row in rows)
    games = [json.loads(line) for line in (log_path / "rollouts" / "step_000079.jsonl").read_text().splitlines()]
    assert any(
        len(game["turns"]) > 1 and game["turns"][1]["observation"].rstrip().endswith("Assistant:") for game in games
    )


@pytest.mark.slow
@pytest.mark.acceptance
def test_guess_number_mean_gain_is_twice_the_threshold(runs: dict[int, SeedRun]) -> None:
    gains = [evaluated_gain(run.rows, "eval/all/won") for run in runs.values()]
    assert sum(gains) / len(gains) >= 2 * EVAL_GAIN, f"evaluated win-rate gains per seed: {gains}"
