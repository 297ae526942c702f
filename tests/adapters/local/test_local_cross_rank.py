"""Decisions every FSDP worker must take alike (skip a step for a NaN loss or a float16 overflow)
are all-reduced on a tensor on the worker's device, and that same tensor is read back."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from adapters.local import distributed_worker
from adapters.local.distributed_worker import agree_any


def test_agree_any_reads_the_tensor_the_collective_reduced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake collective plays the other worker (it saw an overflow, not a NaN) by writing into
    the tensor it is given. On CUDA, reducing `flag.to(device)` (a copy) and reading the original
    would miss that write; on the CPU `.to` returns the tensor itself, so a CPU test cannot show
    the copy: here the collective checks that it gets a tensor on the worker's device and the
    result must reflect its write."""
    reduced: list[torch.Tensor] = []
    other_worker = torch.tensor([0.0, 1.0])

    def all_reduce(tensor: torch.Tensor, op: Any) -> None:
        assert op == torch.distributed.ReduceOp.MAX and tensor.device == torch.device("cpu")
        torch.maximum(tensor, other_worker, out=tensor)
        reduced.append(tensor)

    monkeypatch.setattr(distributed_worker.dist, "all_reduce", all_reduce)
    assert agree_any([False, False], torch.device("cpu")) == [False, True]
    assert agree_any([True, False], torch.device("cpu")) == [True, True]
    assert len(reduced) == 2
