"""The run directory deleted (or deleted and recreated) while the run goes: the run stops with one
error line naming it, exit 2, instead of finishing "successfully" into files nobody can read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import adapters.noop.training_client as noop_client
from tests.safety.helpers import FAST, assert_one_error_line, cli


@pytest.mark.parametrize("recreate", [False, True], ids=["deleted", "deleted-and-recreated"])
def test_run_dir_removed_mid_run(
    recreate: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "run"
    real = noop_client.NoopTrainingClient.optim_step
    calls = []

    async def step_then_delete(self, adam_params):
        calls.append(1)
        if len(calls) == 3:
            shutil.rmtree(log)
            if recreate:  # what a later save (a backend's mkdir -p) or a cleanup script may do
                log.mkdir()
        return await real(self, adam_params)

    monkeypatch.setattr(noop_client.NoopTrainingClient, "optim_step", step_then_delete)
    code, out, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=8", f"log_path={log}")
    assert_one_error_line(code, err, str(log), "deleted or replaced while the run was going")
    assert "run finished" not in out
    assert len(calls) <= 4  # noticed at the step's end, not after the whole run
