"""Shared test helpers (import as `tests.helpers`)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
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


def run_seeds(
    tmp_path_factory: pytest.TempPathFactory, recipe: str, seeds: Sequence[int], *overrides: str
) -> dict[int, SeedRun]:
    """`kitchen run RECIPE seed=S` for every seed side by side (a tiny model keeps 2 cores half
    idle), each in its own log directory; each run's directory and metrics rows, by seed."""
    log_paths = {seed: tmp_path_factory.mktemp(f"{recipe}_seed{seed}") for seed in seeds}  # not thread-safe

    def run(seed: int) -> SeedRun:
        result = run_cli("run", recipe, f"log_path={log_paths[seed]}", f"seed={seed}", *overrides)
        assert result.returncode == 0, result.stderr
        return SeedRun(log_paths[seed], read_metrics(log_paths[seed] / "metrics.jsonl"))

    with ThreadPoolExecutor(len(seeds)) as pool:
        return dict(zip(seeds, pool.map(run, seeds), strict=True))
