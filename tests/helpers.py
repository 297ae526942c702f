"""Shared test helpers (import as `tests.helpers`)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from kitchen.engine.runs.metrics import read_metrics

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 2400) -> subprocess.CompletedProcess[str]:
    """Run the `kitchen` CLI in a subprocess, as a user would. The timeout only catches a hang: the
    longest shipped run (code_rl's defaults) took 18 minutes on 2 cores at load 8-14."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "kitchen", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def evaluated(rows: list[dict[str, Any]], key: str) -> list[float]:
    """A metric at each evaluation of a run: the rows that carry it, in step order."""
    return [row[key] for row in rows if key in row]


def evaluated_gain(rows: list[dict[str, Any]], key: str) -> float:
    """What a run's last evaluation of `key` gained over its first."""
    values = evaluated(rows, key)
    return values[-1] - values[0]


class SeedRun(NamedTuple):
    """One seed's run: its log directory and its metrics rows."""

    log_path: Path
    rows: list[dict[str, Any]]


@dataclass(frozen=True)
class SeedRuns:
    """An acceptance module's runs: `kitchen run RECIPE seed=S *overrides` for every seed. Declared
    at module level as `SEED_RUNS`, so the acceptance tier can queue every module's runs before the
    first test starts, the costliest first (`SeedRunner`)."""

    recipe: str
    seeds: tuple[int, ...]
    cpu_seconds: float
    """One run's CPU time (1 torch thread, quiet machine), measured: orders the queue."""
    overrides: tuple[str, ...] = ()


class SeedRunner:
    """Runs `SeedRuns` as CLI subprocesses, `jobs` at a time, in the order they were queued, so a
    session can queue all its runs up front and each module waits only for its own."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory, jobs: int) -> None:
        self._tmp_path_factory = tmp_path_factory
        self._pool = ThreadPoolExecutor(jobs, thread_name_prefix="seed-run")
        self._queued: dict[SeedRuns, dict[int, Future[SeedRun]]] = {}

    def queue(self, runs: SeedRuns) -> None:
        """Start `runs` when a job is free (once, however often it is queued)."""
        if runs in self._queued:
            return
        futures = {}
        for seed in runs.seeds:
            log_path = self._tmp_path_factory.mktemp(f"{runs.recipe}_seed{seed}")  # here: mktemp is not thread-safe
            futures[seed] = self._pool.submit(_run_seed, runs, seed, log_path)
        self._queued[runs] = futures

    def results(self, runs: SeedRuns) -> dict[int, SeedRun]:
        """Every seed's run, by seed, once all have finished (queued now if they were not)."""
        self.queue(runs)
        return {seed: future.result() for seed, future in self._queued[runs].items()}

    def close(self) -> None:
        """Drop the runs not started (a session stopped early), wait for the running ones."""
        self._pool.shutdown(cancel_futures=True)


def _run_seed(runs: SeedRuns, seed: int, log_path: Path) -> SeedRun:
    result = run_cli("run", runs.recipe, f"log_path={log_path}", f"seed={seed}", *runs.overrides)
    assert result.returncode == 0, f"kitchen run {runs.recipe} seed={seed}: {result.stderr}"
    return SeedRun(log_path, read_metrics(log_path / "metrics.jsonl"))
