"""A tinker request that fails while the next step's requests are already in flight: the CLI
prints its one error line and nothing else, no asyncio 'Task exception was never retrieved'
(the runner cancels and settles the leftover futures). Run in a subprocess, so the leftover
futures are collected when the interpreter ends, as they are for a user."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

DRIVER = """
import sys

import pytest
import tinker

from kitchen.apps.cli import main
from tests.adapters.tinker.fake_checks import service_error
from tests.adapters.tinker.fake_sdk import install_fake_sdk

patch = pytest.MonkeyPatch()
install_fake_sdk(patch, latency_s=0.05)
fake_service = tinker.ServiceClient


def failing_service(**kwargs):
    # the first two forward_backward requests fail: step 0's (awaited, the run's error) and
    # step 1's, submitted before step 0 was collected and never awaited
    service = fake_service(**kwargs)
    service.fail_next("forward_backward", *(service_error(400, "bad batch") for _ in range(2)))
    return service


patch.setattr(tinker, "ServiceClient", failing_service)
sys.exit(main(sys.argv[1:]))
"""


def test_failing_pipelined_request_prints_one_error_line(tmp_path: Path) -> None:
    args = ["run", "sl_basic", "backend=tinker", "lora_rank=4", "data.max_steps=4", "data.batch_size=4", "eval.every=0"]
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, *args, f"log_path={tmp_path / 'run'}"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    err = result.stderr
    assert result.returncode != 0, err
    errors = [line for line in err.splitlines() if line.startswith("kitchen: error:")]
    assert len(errors) == 1 and "forward_backward failed" in errors[0] and "bad batch" in errors[0], err
    assert err.rstrip().endswith(errors[0]), "something was printed after the error line: " + err
    assert "never retrieved" not in err and "Traceback" not in err, err
