"""The default local sandbox: bubblewrap namespaces around the rlimited, uid-dropped program.

Per run: fresh mount, PID, network, IPC and UTS namespaces; a read-only view of the system
(/usr, the /bin and /lib links, a few files of /etc, the interpreter's prefix); the run's temp dir
mounted at /sandbox as the only writable place; no home, project or run dir; an empty
environment; no network at all (only a loopback of its own). When the PID namespace's first
process ends, the kernel kills everything left in it, so nothing outlives a run.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from sandbox.local import LocalSandbox, ResourceLimits
from sandbox.types import SandboxUnavailableError

SANDBOX_DIR = "/sandbox"
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")


def _system_view() -> list[str]:
    """bwrap arguments for a read-only /usr and the top-level dirs (links on merged-/usr systems)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for path in _SYSTEM_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in _ETC_FILES:
        args += ["--ro-bind-try", path, path]
    return args


def _prefix_view(prefix: str) -> list[str]:
    """Mount the interpreter's prefix read-only at its own path, its parents made traversable
    (bwrap would copy their modes, and a prefix under /root would be unreachable once uid-dropped)."""
    if prefix == "/usr" or prefix.startswith("/usr/"):
        return []
    args: list[str] = []
    parents = [str(p) for p in reversed(Path(prefix).parents) if str(p) != "/"]
    for parent in parents:
        args += ["--perms", "0755", "--dir", parent]
    return [*args, "--ro-bind", prefix, prefix]


class BubblewrapSandbox(LocalSandbox):
    """Runs `python main.py` inside bwrap; `python` defaults to this interpreter's base install."""

    launcher_prefixes = ("bwrap: ", "prlimit: ", "setpriv: ")

    def __init__(self, concurrency: int = 4, limits: ResourceLimits | None = None, python: str | None = None) -> None:
        super().__init__(concurrency, limits or ResourceLimits())
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise SandboxUnavailableError("bubblewrap sandbox: `bwrap` is not on PATH (apt-get install bubblewrap)")
        self.bwrap = bwrap
        self.python = os.path.realpath(python or sys.executable)
        prefix = sys.base_prefix if python is None else str(Path(self.python).parent.parent)
        self._fixed_args = [
            *_system_view(),
            *_prefix_view(os.path.realpath(prefix)),
            "--proc", "/proc",
            "--dev", "/dev",
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
            "--setenv", "HOME", SANDBOX_DIR,
            "--setenv", "TMPDIR", SANDBOX_DIR,
            "--setenv", "LANG", "C.UTF-8",
            "--chdir", SANDBOX_DIR,
        ]  # fmt: skip
        if self.uids.enabled:
            # Root: keep only what entering the run's 0700 dir and setpriv's drop to its uid need;
            # the drop to a non-zero uid then clears every capability.
            keep = ("CAP_DAC_OVERRIDE", "CAP_SETUID", "CAP_SETGID")
            self._fixed_args += ["--cap-drop", "ALL", *(arg for cap in keep for arg in ("--cap-add", cap))]
        reason = self.probe()
        if reason is not None:
            raise SandboxUnavailableError(f"bubblewrap sandbox cannot run here: {reason}")

    def command(self, workdir: Path, uid: int | None, mounts: Mapping[str, str] | None = None) -> list[str]:
        shown = [arg for target, source in (mounts or {}).items() for arg in ("--bind", str(workdir / source), target)]
        return [self.bwrap, *self._fixed_args, "--bind", str(workdir), SANDBOX_DIR, *shown, "--", *self.launcher(uid)]

    def cpu_limit_codes(self) -> set[int]:
        return {128 + signal.SIGXCPU}  # bwrap exits 128 + signal when its child is killed by one
