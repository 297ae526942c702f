"""Exact resume: a run SIGKILLed mid-way and rerun logs the same per-step metrics as an
uninterrupted run (local backend, CPU, same seed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from tests.helpers import REPO, run_cli

ARGS = [
    "data.max_steps=30",
    "checkpoint.save_every=5",
    "eval.every=10",
    "data.batch_size=16",
    "data.max_length=64",
    "optimizer.learning_rate=3e-3",
]


def _comparable(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def _start(log_path: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "kitchen", "run", "sl_basic", f"log_path={log_path}", *ARGS],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted(tmp_path: Path) -> None:
    reference = tmp_path / "uninterrupted"
    result = run_cli("run", "sl_basic", f"log_path={reference}", *ARGS)
    assert result.returncode == 0, result.stderr

    killed = tmp_path / "killed"
    process = _start(killed)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if any(r.step >= 5 for r in read_records(killed / "checkpoints.jsonl")):
            break
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    names = [r.name for r in read_records(killed / "checkpoints.jsonl")]
    assert names and "final" not in names, f"the run was not killed mid-way: {names}"

    resumed = run_cli("run", "sl_basic", f"log_path={killed}", *ARGS)
    assert resumed.returncode == 0, resumed.stderr
    expected = _comparable(read_metrics(reference / "metrics.jsonl"))
    actual = _comparable(read_metrics(killed / "metrics.jsonl"))
    assert [row["step"] for row in actual] == list(range(30))
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert got.keys() == want.keys(), f"step {want['step']}: different metrics"
        assert got == pytest.approx(want, rel=1e-6, abs=1e-7), f"step {want['step']} differs"
