"""Running untrusted programs (model-written code) under limits: the port and its sandboxes."""

from sandbox.factory import SandboxKind, bubblewrap_unavailable_reason, make_sandbox
from sandbox.local import ResourceLimits
from sandbox.types import Program, RunResult, RunStatus, Sandbox, SandboxUnavailableError

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
