"""A step whose loss is NaN is not applied (noop and local backends), and the run stops with
exit 2 after `max_bad_steps` consecutive bad steps; the last good checkpoint stays the resume point."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import adapters.noop.training_client as noop_client
from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from tests.safety.helpers import FAST, assert_one_error_line, cli


def _nan_at_versions(monkeypatch: pytest.MonkeyPatch, bad: set[int]) -> list[int]:
    """Pseudo-logprobs are NaN while the weights are at one of the `bad` versions."""
    real = noop_client.target_logprobs_BL
    seen: list[int] = []

    def patched(weights, inputs, targets):
        seen.append(weights.version)
        values = real(weights, inputs, targets)
        return np.full_like(values, math.nan) if weights.version in bad else values

    monkeypatch.setattr(noop_client, "target_logprobs_BL", patched)
    return seen


def test_nan_loss_stops_the_run_without_applying_the_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "run"
    _nan_at_versions(monkeypatch, {3})  # the 4th step (index 3) sees NaN, and so would every later one
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=8", f"log_path={log}")
    assert_one_error_line(code, err, "step 4", "NaN/inf", "max_bad_steps=0")
    rows = read_metrics(log / "metrics.jsonl")
    assert rows[3]["optim/nonfinite_step"] == 1.0
    records = read_records(log / "checkpoints.jsonl")
    assert [r.name for r in records] == ["000002"], "no checkpoint after the bad step"
    state = (log / "checkpoints/training-0/state/000002.json").read_text()
    assert '"version": 2' in state


def test_max_bad_steps_tolerates_a_transient_nan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "run"
    _nan_at_versions(monkeypatch, {3})
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=8", "max_bad_steps=1", f"log_path={log}")
    # the step at version 3 is skipped, so the next step sees version 3 again: two bad in a row
    assert_one_error_line(code, err, "2 step(s) in a row", "max_bad_steps=1")


def test_local_backend_skips_nonfinite_gradients() -> None:
    import asyncio

    import torch

    from adapters.local.backend import LocalBackend
    from adapters.local.training_client import LocalTrainingClient
    from train_core.types import AdamParams, Datum, ModelInput, TensorData

    async def go() -> None:
        backend = LocalBackend(checkpoint_dir=Path("/nonexistent-unused"), device="cpu")
        client = await backend.create_training_client("tiny", lora_rank=2)
        datum = Datum(
            ModelInput.from_ints([1, 2, 3]),
            {
                "target_tokens": TensorData.from_list([2, 3, 4], "int64"),
                "weights": TensorData.from_list([1.0] * 3, "float32"),
            },
        )
        await (await client.forward_backward([datum], "cross_entropy"))
        assert isinstance(client, LocalTrainingClient)
        params = [p for p in client._params]
        before = [p.detach().clone() for p in params]
        params[0].grad = torch.full_like(params[0], float("nan"))
        # The gradient norm is measured when clipping needs it (without clipping, the guard sees a
        # NaN/inf loss, which is where a NaN gradient comes from in practice).
        out = await (await client.optim_step(AdamParams(learning_rate=1e-2, grad_clip_norm=1.0)))
        assert out.metrics["nonfinite_step"] == 1.0
        assert all(torch.equal(a, b.detach()) for a, b in zip(before, params, strict=True))
        await backend.close()

    asyncio.run(go())
