"""Pick a sandbox by name; "auto" prefers bubblewrap and falls back to the process sandbox."""

from __future__ import annotations

import warnings
from functools import cache
from typing import Literal

from kitchen.sandbox.bubblewrap import BubblewrapSandbox
from kitchen.sandbox.local import ResourceLimits
from kitchen.sandbox.process import ProcessSandbox
from kitchen.sandbox.sandboxfusion import SandboxFusionSandbox
from kitchen.sandbox.types import Sandbox, SandboxUnavailableError

SandboxKind = Literal["auto", "bubblewrap", "process", "sandboxfusion"]


@cache
def bubblewrap_unavailable_reason() -> str | None:
    """Why bubblewrap cannot run here (probed once per process), or None when it can."""
    try:
        BubblewrapSandbox(concurrency=1)
    except SandboxUnavailableError as exc:
        return str(exc)
    return None


def make_sandbox(
    kind: SandboxKind = "auto",
    url: str | None = None,
    concurrency: int = 4,
    limits: ResourceLimits | None = None,
) -> Sandbox:
    """A sandbox of `kind`; `url` is the SandboxFusion server (and only for that kind)."""
    if kind not in ("auto", "bubblewrap", "process", "sandboxfusion"):
        raise ValueError(f"unknown sandbox kind {kind!r}; expected auto, bubblewrap, process or sandboxfusion")
    if (url is not None) != (kind == "sandboxfusion"):
        raise ValueError("give url exactly when the sandbox kind is sandboxfusion")
    if kind == "sandboxfusion":
        assert url is not None
        return SandboxFusionSandbox(url, concurrency)
    if kind == "bubblewrap":
        return BubblewrapSandbox(concurrency, limits)
    if kind == "auto":
        reason = bubblewrap_unavailable_reason()
        if reason is None:
            return BubblewrapSandbox(concurrency, limits)
        warnings.warn(f"sandbox auto: bubblewrap unavailable ({reason}); falling back to processes", stacklevel=2)
    return ProcessSandbox(concurrency, limits)
