"""The sandbox port: run one untrusted program under limits and say how it ended.

Every implementation answers with the same `RunResult`, so graders and envs never care where a
program ran. A broken sandbox is a `sandbox_error` result, not an exception: one bad run must not
crash an RL run.
"""

from __future__ import annotations

import asyncio
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from train_core.errors import InvalidInputError

RunStatus = Literal["ok", "failed", "timeout", "sandbox_error"]
OUTPUT_CAP_BYTES = 64 * 1024
MAIN_FILE = "main.py"
RESERVED_MOUNT_ROOTS = frozenset(
    {"", "bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sandbox", "sbin", "sys", "usr"}
)
"""Top-level dirs a mount may not cover: the system view the sandbox relies on, and its own dir."""


class SandboxUnavailableError(InvalidInputError):
    """The asked-for sandbox cannot run here (missing tool, no namespaces, unreachable server)."""


def check_mount(target: str, source: str) -> None:
    """A mount shows a dir of the run at an absolute path; it must not hide the system's own dirs."""
    norm = posixpath.normpath(target)
    if not target.startswith("/") or norm != target or norm.split("/")[1] in RESERVED_MOUNT_ROOTS:
        reserved = ", /".join(sorted(RESERVED_MOUNT_ROOTS - {""}))
        raise ValueError(f"sandbox mount {target!r}: give a normalised absolute path outside /{reserved}")
    check_file_name(source)


def check_file_name(name: str) -> None:
    """Extra files land in the sandbox's temp dir; a name must not reach outside it."""
    norm = posixpath.normpath(name)
    if not name or name.startswith("/") or norm.startswith("..") or norm in (".", MAIN_FILE) or "\0" in name:
        raise ValueError(f"sandbox file name {name!r}: give a relative path inside the sandbox, not {MAIN_FILE}")


@dataclass(frozen=True)
class Program:
    """What to run: `code` is the main file; `files` are written next to it; `stdin` is fed in."""

    code: str
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    stdin: str = ""
    language: str = "python"
    mounts: Mapping[str, str] = field(default_factory=dict)
    """Absolute path in the sandbox -> dir of the run (relative, made if missing) shown there,
    writable: for programs that expect fixed paths (a task's /app). Only bubblewrap can."""

    def __post_init__(self) -> None:
        for name in self.files:
            check_file_name(name)
        for target, source in self.mounts.items():
            check_mount(target, source)


@dataclass(frozen=True)
class RunResult:
    """How a run ended. Output is decoded as UTF-8 (bad bytes replaced) and capped per stream."""

    status: RunStatus
    exit_code: int | None
    stdout: str
    stderr: str
    elapsed_s: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    detail: str = ""
    """Why, for `timeout` and `sandbox_error` (which limit was hit, what broke)."""
    memory_killed: bool = False
    """Killed for holding more resident memory, all its processes together, than the sandbox allows."""


class Sandbox(ABC):
    """Runs programs with at most `concurrency` in flight; `run` never blocks the event loop."""

    def __init__(self, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"sandbox concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency
        self._gate = asyncio.Semaphore(concurrency)

    async def run(self, program: Program, timeout_s: float) -> RunResult:
        """Run `program` with a wall-clock limit of `timeout_s` seconds."""
        if not timeout_s > 0:
            raise ValueError(f"sandbox timeout must be positive, got {timeout_s}")
        async with self._gate:
            return await self._run(program, timeout_s)

    @abstractmethod
    async def _run(self, program: Program, timeout_s: float) -> RunResult: ...

    async def aclose(self) -> None:  # noqa: B027 - local sandboxes hold nothing between runs
        """Release what the sandbox holds between runs (HTTP connections)."""
