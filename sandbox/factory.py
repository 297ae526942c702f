"""Pick a sandbox by name; "auto" prefers bubblewrap and falls back to the process sandbox."""

from __future__ import annotations

import warnings
from functools import cache
from typing import Literal

from sandbox.bubblewrap import BubblewrapSandbox
from sandbox.local import ResourceLimits
from sandbox.process import ProcessSandbox
from sandbox.sandboxfusion import SandboxFusionSandbox
from sandbox.types import Sandbox, SandboxUnavailableError

SandboxKind = Literal["auto", "bubblewrap", "process", "sandboxfusion"]


@cache
def bubblewrap_unavailable_reason() -> str | None:
    """Why bubblewrap cannot run here (probed once per process), or None when it can."""
    try:
        BubblewrapSandbox(concurrency=1)
    except SandboxUnavailableError as exc:
        return str(exc)
    return None


UNSAFE_SANDBOX_SETTING = "sandbox.allow_unsafe"


def make_sandbox(
    kind: SandboxKind = "auto",
    url: str | None = None,
    concurrency: int = 4,
    limits: ResourceLimits | None = None,
    allow_process: bool = True,
) -> Sandbox:
    """A sandbox of `kind`; `url` is the SandboxFusion server (and only for that kind). With
    `allow_process` false the process sandbox (asked for, or auto's fallback) is refused: RL
    optimizes against whatever it lets a program get away with."""
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
        if not allow_process:
            raise SandboxUnavailableError(
                f"sandbox auto: bubblewrap unavailable ({reason}), and the process sandbox is not safe for RL "
                f"(no network or filesystem isolation; its programs' children can outlive the trainer): install "
                f"bubblewrap, use sandbox=sandboxfusion, or set {UNSAFE_SANDBOX_SETTING}: true to accept the risk"
            )
        warnings.warn(f"sandbox auto: bubblewrap unavailable ({reason}); falling back to processes", stacklevel=2)
    elif not allow_process:
        raise SandboxUnavailableError(
            "sandbox=process is not safe for RL (no network or filesystem isolation; its programs' children can "
            f"outlive the trainer): use bubblewrap or sandboxfusion, or set {UNSAFE_SANDBOX_SETTING}: true"
        )
    return ProcessSandbox(concurrency, limits)
