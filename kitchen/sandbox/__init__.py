"""Running untrusted programs (model-written code) under limits: the port and its sandboxes."""

from kitchen.sandbox.factory import SandboxKind, bubblewrap_unavailable_reason, make_sandbox
from kitchen.sandbox.local import ResourceLimits
from kitchen.sandbox.types import Program, RunResult, RunStatus, Sandbox, SandboxUnavailableError

__all__ = [
    "Program",
    "ResourceLimits",
    "RunResult",
    "RunStatus",
    "Sandbox",
    "SandboxKind",
    "SandboxUnavailableError",
    "bubblewrap_unavailable_reason",
    "make_sandbox",
]
