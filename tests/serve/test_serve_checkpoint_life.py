"""In-process checks of what the SDK cannot reach quickly: a checkpoint's TTL running out (an hour
at least through the API), files shared by copies, and the [T, K] cross-entropy expansion's edges."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from adapters.noop import NoopBackend
from kitchen.apps.serve.catalog import ModelCatalog
from kitchen.apps.serve.cross_entropy_2d import expand_2d_targets
from kitchen.apps.serve.errors import NotFound
from kitchen.apps.serve.records import CheckpointRecord, RecordStore, RunRecord, SessionRecord
from kitchen.apps.serve.service import TinkerService
from kitchen.apps.serve.wire import WireError
from kitchen.engine.backends import get_backend_spec
from train_core.types import Datum, ForwardBackwardOutput, ModelInput, TensorData

OWNER = "owner"


def service_with(tmp_path: Path) -> TinkerService:
    store = RecordStore(tmp_path / "store")
    store.add_session(SessionRecord("s1", OWNER, time.time()))
    store.add_run(RunRecord("s1:train:0", OWNER, "s1", "tiny", 4, time.time(), time.time()))
    return TinkerService(NoopBackend(), get_backend_spec("noop"), ModelCatalog({"tiny": "tiny"}), store)


def checkpoint(service: TinkerService, name: str, files: Path, expires_at: float | None) -> str:
    path = f"tinker://s1:train:0/weights/{name}"
    record = CheckpointRecord(
        path, "s1:train:0", "training", name, str(files), OWNER, time.time(), None, False, expires_at
    )
    service.store.add_checkpoint(record)
    return path


def test_an_expired_checkpoint_is_gone_and_its_files_go_with_the_last_copy(tmp_path: Path) -> None:
    service = service_with(tmp_path)
    files = service.store.checkpoint_dir / "weights" / "shared"
    files.mkdir(parents=True)
    (files / "weights.safetensors").write_bytes(b"0" * 16)
    expired = checkpoint(service, "old", files, time.time() - 1)
    copy = checkpoint(service, "copy", files, time.time() + 3600)
    with pytest.raises(NotFound, match="expired"):
        service.checkpoint(OWNER, expired)
    assert files.is_dir()  # the copy still uses them
    assert service.checkpoint(OWNER, copy).backend_path == str(files)
    service.store.data.checkpoints[copy].expires_at = time.time() - 1
    with pytest.raises(NotFound):
        service.checkpoint(OWNER, copy)
    assert not files.exists()
    assert service.store.data.checkpoints == {}


def test_a_ttl_outside_the_documented_range_is_refused(tmp_path: Path) -> None:
    service = service_with(tmp_path)
    assert service.expiry(None) is None
    with pytest.raises(Exception, match="3600"):
        service.expiry(60)
    with pytest.raises(Exception, match="10 years"):
        service.expiry(11 * 365 * 24 * 3600)


def grid_datum(targets: list[list[int]], weights: list[list[float]]) -> Datum:
    t, k = len(targets), len(targets[0])
    return Datum(
        ModelInput.from_ints(list(range(1, t + 1))),
        {
            "target_tokens": TensorData(torch.tensor(targets), "int64", (t, k)),
            "weights": TensorData(torch.tensor(weights), "float32", (t, k)),
        },
    )


def test_grids_expand_to_columns_and_come_back_with_padded_cells_nan() -> None:
    one_d = Datum(ModelInput.from_ints([1, 2]), {"target_tokens": TensorData.from_list([3, 4], "int64")})
    grid = grid_datum([[3, -1], [4, 5]], [[1.0, 0.0], [0.5, 0.5]])
    expanded = expand_2d_targets([one_d, grid], "cross_entropy")
    assert expanded is not None and len(expanded.data) == 3
    assert expanded.data[2].loss_fn_inputs["target_tokens"].to_torch().tolist() == [
        0,
        5,
    ]  # the padded cell scores token 0
    outputs = [{"logprobs": TensorData.from_list([-1.0 - i, -2.0 - i], "float32")} for i in range(3)]
    back = expanded.regroup(ForwardBackwardOutput(outputs, {"loss:sum": 1.0}))
    assert back.loss_fn_outputs[0]["logprobs"].to_torch().tolist() == [-1.0, -2.0]
    regrouped = back.loss_fn_outputs[1]["logprobs"].to_torch()
    assert regrouped.shape == (2, 2) and regrouped[0, 0] == -2.0 and regrouped[1, 1] == -4.0
    assert torch.isnan(regrouped[0, 1])
    assert expand_2d_targets([one_d], "cross_entropy") is None


def test_a_grid_is_refused_where_it_cannot_mean_anything() -> None:
    with pytest.raises(WireError, match="weight 0"):
        expand_2d_targets([grid_datum([[3, -1]], [[1.0, 1.0]])], "cross_entropy")
    with pytest.raises(WireError, match="cross_entropy only"):
        expand_2d_targets([grid_datum([[3, 4]], [[1.0, 1.0]])], "ppo")
