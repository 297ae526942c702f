"""RL steps (sync and stream-minibatch modes) are guarded like supervised ones: a step whose
optimizer skipped a NaN/inf update counts as bad, and more than `max_bad_steps` in a row stop the
run with exit 2."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import adapters.noop.training_client as noop_client
from kitchen.engine.runs.metrics import read_metrics
from tests.safety.helpers import assert_one_error_line, cli

RL = (
    "backend=noop",
    "warm_start.steps=0",
    "rl.groups_per_batch=4",
    "eval.every=0",
    "checkpoint.save_every=1",
    "rl.num_batches=6",
)


def _nan_from_version(monkeypatch: pytest.MonkeyPatch, first_bad: int) -> None:
    real = noop_client.target_logprobs_BL

    def patched(weights, inputs, targets):
        values = real(weights, inputs, targets)
        return np.full_like(values, math.nan) if weights.version >= first_bad else values

    monkeypatch.setattr(noop_client, "target_logprobs_BL", patched)


@pytest.mark.parametrize("mode", [(), ("rl.stream_minibatch.num_minibatches=2",)], ids=["sync", "stream"])
def test_nan_rl_step_stops_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, mode: tuple[str, ...]
) -> None:
    log = tmp_path / "run"
    _nan_from_version(monkeypatch, 2)
    code, _, err = cli(capsys, "run", "math_rl", *RL, *mode, f"log_path={log}")
    assert_one_error_line(code, err, "NaN/inf", "max_bad_steps=0")
    rows = read_metrics(log / "metrics.jsonl")
    assert any(row.get("optim/nonfinite_step") == 1.0 for row in rows)


def test_max_bad_steps_lets_rl_tolerate_bad_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "run"
    _nan_from_version(monkeypatch, 2)
    code, _, err = cli(capsys, "run", "math_rl", *RL, "max_bad_steps=2", f"log_path={log}")
    assert_one_error_line(code, err, "3 step(s) in a row", "max_bad_steps=2")


def test_finite_rl_run_is_unaffected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", "math_rl", *RL, f"log_path={tmp_path / 'run'}")
    assert code == 0, err
