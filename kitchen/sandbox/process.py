"""The fallback sandbox: a child process under rlimits, in its own session, as its own uid.

It contains CPU, memory (per process and in total), process count, file size, wall time,
leftover processes and (when the trainer is root) signals to the trainer. The program runs with
no-new-privileges and is killed if the trainer dies. A root trainer also gives it pid and
network namespaces with its own /proc: it sees no other process, reaches no network, and
everything it started dies with it. It does not hide the filesystem: the program can read
whatever its uid may read and write to world-writable places such as /tmp. When the trainer is
not root there is no uid drop and no namespace: the program then runs as the trainer's user, can
reach the network, write to the user's files, read `/proc/<trainer>/environ`, signal the trainer
and leave daemons behind that escaped its session. RL refuses this sandbox unless
`allow_unsafe_sandbox: true`; use bubblewrap or SandboxFusion for untrusted code.
"""

from __future__ import annotations

import signal
import warnings
from pathlib import Path

from kitchen.sandbox.local import LocalSandbox, ResourceLimits, default_pythons, require_tool
from kitchen.sandbox.types import SandboxUnavailableError

PROCESS_SANDBOX_WARNING = (
    "process sandbox: the program is NOT cut off from the network or the filesystem "
    "(install bubblewrap, or use a SandboxFusion server, for untrusted code)"
)


class ProcessSandbox(LocalSandbox):
    """Runs `python main.py` in a private temp dir; `python` defaults to the first interpreter
    the sandbox uid can execute."""

    def __init__(self, concurrency: int = 4, limits: ResourceLimits | None = None, python: str | None = None) -> None:
        super().__init__(concurrency, limits or ResourceLimits())
        warnings.warn(PROCESS_SANDBOX_WARNING, stacklevel=2)
        self.guard = require_tool("setpriv")
        self.unshare = require_tool("unshare") if self.uids.enabled else ""
        failures = []
        for candidate in [python] if python else default_pythons():
            self.python = candidate
            reason = self.probe()
            if reason is None:
                return
            failures.append(f"{candidate}: {reason}")
        raise SandboxUnavailableError(
            "process sandbox: no interpreter runs as the sandbox uid (" + "; ".join(failures) + "); "
            "pass python= an interpreter every user may execute"
        )

    def command(self, workdir: Path, uid: int | None) -> list[str]:
        # After the uid drop (a credential change clears the parent-death signal): the program is
        # SIGKILLed when the trainer dies, and neither it nor its children gain privileges.
        argv = self.launcher(uid)
        at = argv.index(self.python)
        argv = [*argv[:at], self.guard, "--pdeathsig=KILL", "--no-new-privs", "--", *argv[at:]]
        if uid is None:
            return argv
        # Root: pid and network namespaces of its own, with a fresh /proc. Other processes (and
        # their command lines) are out of sight, there is no network but a loopback that is down,
        # and when the namespace's first process dies (the trainer died: parent-death signals down
        # the chain) the kernel kills every process left in it.
        namespace = [self.unshare, "--pid", "--net", "--fork", "--kill-child=SIGKILL", "--mount-proc", "--"]
        return [self.guard, "--pdeathsig=KILL", "--", *namespace, *argv]

    def cpu_limit_codes(self) -> set[int]:
        return {-signal.SIGXCPU}
