"""Acceptance (issue 42 item 9): `kitchen run terminal_rl` with its defaults (embedded tiny model,
offline, CPU, the bubblewrap sandbox) learns at every one of three seeds: the sampled reward of
the last 5 of 16 RL steps beats the first 5's by at least `REWARD_GAIN` at every seed, and the
solve rate on the held-out tasks (recipes/data/terminal_eval, 8 episodes of each of 4), evaluated
right after the warm start and after the last RL step, rises by at least `SOLVE_GAIN` on average
over the seeds; the mean gains are at least twice the thresholds.

The warm start imitates a teacher who sends the task's own reference solution half of the time
and another training task's otherwise (with the real error it gets), so it teaches the protocol
and the commands but only weakly which command fits which task; the gain asserted is RL's, over
the warm-started model. The held-out tasks are the training tasks' twins: the same instructions
over other files, with other answers, so a command scores there only if it does the job (a
memorised answer fails); held-out tasks with new instructions are out of reach of the tiny model.

The three runs go side by side (one torch thread each, the embedded model's default). Measured
with the defaults (2026-11-28, 2 CPU cores shared at load 11-18, the three at once, 7 min wall,
about 70 s of CPU time a run, so some 1 min 50 s on a quiet machine): held-out solve rate 0.344 ->
0.500, 0.406 -> 0.438, 0.375 -> 0.500 at seeds 0, 1, 2 (gains 0.156, 0.031, 0.125; mean 0.104);
sampled reward (first 5 -> last 5 steps) 0.325 -> 0.412, 0.400 -> 0.512, 0.456 -> 0.575 (gains
0.087, 0.112, 0.119; mean 0.106). The held-out gain is small and noisy (32 episodes, one episode
is 0.031, and seed 1 gained one): a per-seed held-out threshold would rest on one episode, so the
held-out gain is asserted on the mean over the seeds and the sampled reward carries the per-seed
claim. At 2 torch threads (`local.cpu_threads=2`, other trajectories; 9 min at once at the same
load): held-out 0.344 -> 0.469, 0.406 -> 0.438, 0.375 -> 0.469 (gains 0.125, 0.031, 0.094;
mean 0.083), sampled reward 0.212 -> 0.300, 0.400 -> 0.512, 0.456 -> 0.569 (mean gain 0.104)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from kitchen.engine.runs.metrics import read_metrics
from sandbox import bubblewrap_unavailable_reason
from tests.helpers import run_cli

SOLVE_GAIN = 0.03
"""Held-out solve rate gained on average over the seeds (one episode of the 32), and twice this."""
REWARD_GAIN = 0.04
"""Sampled reward, last 5 RL steps over the first 5, gained by every seed (twice this on average)."""
SEEDS = (0, 1, 2)

pytestmark = pytest.mark.skipif(
    bubblewrap_unavailable_reason() is not None, reason=f"bubblewrap: {bubblewrap_unavailable_reason()}"
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[dict[str, Any]]]:
    log_paths = {seed: tmp_path_factory.mktemp(f"terminal_rl_seed{seed}") for seed in SEEDS}  # not thread-safe

    def run(seed: int) -> list[dict[str, Any]]:
        result = run_cli("run", "terminal_rl", f"log_path={log_paths[seed]}", f"seed={seed}")
        assert result.returncode == 0, result.stderr
        return read_metrics(log_paths[seed] / "metrics.jsonl")

    with ThreadPoolExecutor(len(SEEDS)) as pool:
        return dict(zip(SEEDS, pool.map(run, SEEDS), strict=True))


def held_out_solved(rows: list[dict[str, Any]]) -> list[float]:
    return [row["eval/all/solved"] for row in rows if "eval/all/solved" in row]


def reward_gain(rows: list[dict[str, Any]]) -> float:
    rewards = [row["env/all/reward/total"] for row in rows]
    return sum(rewards[-5:]) / 5 - sum(rewards[:5]) / 5


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.parametrize("seed", SEEDS)
def test_terminal_rl_defaults_raise_the_sampled_reward(runs: dict[int, list[dict[str, Any]]], seed: int) -> None:
    rows = runs[seed]
    solved = held_out_solved(rows)
    assert len(rows) == 16 and len(solved) == 2, "evaluated right after the warm start and after the last step"
    warm_start = next(row for row in rows if "warm_start/nll_last" in row)
    assert warm_start["warm_start/nll_last"] < 0.1 < warm_start["warm_start/nll_first"]
    assert all(row["env/all/sandbox_error"] == 0.0 for row in rows)
    rewards = [row["env/all/reward/total"] for row in rows]
    assert reward_gain(rows) >= REWARD_GAIN, f"sampled reward went from {rewards[:5]} to {rewards[-5:]}"


@pytest.mark.slow
@pytest.mark.acceptance
def test_terminal_rl_mean_gain_is_twice_the_threshold(runs: dict[int, list[dict[str, Any]]]) -> None:
    gains = [held_out_solved(rows)[-1] - held_out_solved(rows)[0] for rows in runs.values()]
    assert sum(gains) / len(gains) >= 2 * SOLVE_GAIN, f"held-out solve-rate gains per seed: {gains}"
    reward_gains = [reward_gain(rows) for rows in runs.values()]
    assert sum(reward_gains) / len(reward_gains) >= 2 * REWARD_GAIN, f"sampled reward gains per seed: {reward_gains}"
