"""One process per run directory: a second `kitchen run` on a running run exits 2 naming the
holder's PID; the lock goes when the holder exits, however it exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow  # two real processes, ~60 s

SLOW = (
    "backend=noop",
    "data.max_steps=40",
    "checkpoint.save_every=5",
    "eval.every=0",
    "noop.latency={forward_backward: 0.4}",
)


def _start(log: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "kitchen", "run", "sl_basic", *SLOW, f"log_path={log}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_lock(log: Path, proc: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        lock = log / ".lock"
        if lock.exists() and lock.read_text().strip() and (log / "metrics.jsonl").exists():
            return lock.read_text().strip()
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("the first run never took the lock")


def test_second_process_is_refused_naming_the_holder(tmp_path: Path) -> None:
    log = tmp_path / "run"
    first = _start(log)
    try:
        holder = _wait_for_lock(log, first)
        assert holder == str(first.pid)
        second = _start(log)
        out, err = second.communicate(timeout=120)
        assert second.returncode == 2, (out, err)
        assert f"pid {first.pid}" in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
        _, first_err = first.communicate(timeout=300)
        assert first.returncode == 0, first_err
    finally:
        first.kill()
    steps = [line for line in (log / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert len(steps) == 40, "a refused run must not add metrics rows"


def test_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    log = tmp_path / "run"
    first = _start(log)
    try:
        _wait_for_lock(log, first)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        first.kill()
    second = _start(log)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert "run.resume" in err or "run finished" in out
