"""Shared test helpers (import as `tests.helpers`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
