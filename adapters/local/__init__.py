"""Local backend: torch + transformers (+ peft for LoRA), on CPU or GPU.

`LocalBackend` is imported on first use, so loading the backend registry (`kitchen ls`,
`kitchen validate`) does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adapters.local.backend import LocalBackend

__all__ = ["LocalBackend"]


def __getattr__(name: str) -> Any:
    if name == "LocalBackend":
        from adapters.local.backend import LocalBackend

        return LocalBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
