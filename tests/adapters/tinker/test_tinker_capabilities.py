"""The tinker capability list matches the ports and the adapter, and needs no SDK to read."""

from __future__ import annotations

import importlib
import sys

import pytest

from adapters.tinker import capabilities
from adapters.tinker.backend import TinkerBackend
from adapters.tinker.loss_requests import SDK_LOSS_FNS
from adapters.tinker.registration import BACKEND
from adapters.tinker.sampling_client import TinkerSamplingClient
from adapters.tinker.training_client import TinkerTrainingClient
from kitchen.engine import ports
from kitchen.engine.backends import get_backend_spec

ADAPTER_CLASSES = {
    "ServiceBackend": TinkerBackend,
    "TrainingClient": TinkerTrainingClient,
    "SamplingClient": TinkerSamplingClient,
}


def test_every_port_call_is_listed_and_implemented() -> None:
    assert ports.PORT_CALLS <= capabilities.SUPPORTED_CALLS <= ports.PORT_CALLS | ports.OPTIONAL_CALLS
    for call in capabilities.SUPPORTED_CALLS:
        port_name, method = call.split(".")
        assert callable(getattr(ADAPTER_CLASSES[port_name], method)), call


def test_loss_fns_are_ones_the_service_runs() -> None:
    assert capabilities.SUPPORTED_LOSS_FNS <= SDK_LOSS_FNS
    assert BACKEND.problems([], ["cross_entropy", "ppo", "my_loss"], lora_rank=8) == [
        "it does not run loss_fn 'my_loss'"
    ]


def test_registered_spec_reports_unsupported_calls_sorted_and_the_lora_requirement() -> None:
    calls = ["TrainingClient.forward_backward", "TrainingClient.zap", "SamplingClient.beam_search"]
    assert BACKEND.problems(calls, [], lora_rank=8) == [
        "it does not support SamplingClient.beam_search",
        "it does not support TrainingClient.zap",
    ]
    assert BACKEND.problems(capabilities.SUPPORTED_CALLS, [], lora_rank=8) == []
    assert BACKEND.problems([], [], lora_rank=None) == [
        "lora_rank: backend 'tinker' trains LoRA adapters only; set lora_rank (e.g. 32)"
    ]
    assert get_backend_spec("tinker") is BACKEND


def test_capabilities_import_without_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tinker", None)
    monkeypatch.delitem(sys.modules, "adapters.tinker.capabilities")
    fresh = importlib.import_module("adapters.tinker.capabilities")
    assert fresh.SUPPORTED_CALLS == capabilities.SUPPORTED_CALLS


def test_gspo_passes_through_to_the_service() -> None:
    assert "gspo" in capabilities.SUPPORTED_LOSS_FNS and "gspo" in SDK_LOSS_FNS
