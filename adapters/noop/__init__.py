"""Noop backend: a deterministic, seeded fake of the training service for fast workflow tests.

Its classes are imported on first use, so loading the backend registry (`kitchen ls`,
`kitchen validate`) does not import transformers (for the tokenizer) or torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adapters.noop.backend import NoopBackend
    from adapters.noop.call_log import NoopCall
    from adapters.noop.sampling_client import NoopSamplingClient
    from adapters.noop.training_client import NoopTrainingClient

__all__ = ["NoopBackend", "NoopCall", "NoopSamplingClient", "NoopTrainingClient"]

_MODULES = {
    "NoopBackend": "adapters.noop.backend",
    "NoopCall": "adapters.noop.call_log",
    "NoopSamplingClient": "adapters.noop.sampling_client",
    "NoopTrainingClient": "adapters.noop.training_client",
}


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return getattr(importlib.import_module(_MODULES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
