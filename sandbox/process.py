"""The fallback sandbox: a child process under rlimits, in its own session, as its own uid.

It contains CPU, memory (per process and in total), process count, file size, wall time,
leftover processes and (when the trainer is root) signals to the trainer. The program runs with
no-new-privileges and is killed if the trainer dies. A root trainer also gives it pid and
network namespaces with its own /proc: it sees no other process, reaches no network, and
everything it started dies with it; and a mount namespace in which /tmp, /var/tmp and /dev/shm
are its own run dir (removed after the run), so nothing it writes there outlives it or reaches
another process. It does not hide the rest of the filesystem: the program can read whatever its
uid may read, and write to any other world-writable place. When the trainer is
not root there is no uid drop and no namespace: the program then runs as the trainer's user, can
reach the network, write to the user's files, read `/proc/<trainer>/environ`, signal the trainer
and leave daemons behind that escaped its session. RL refuses this sandbox unless
`sandbox.allow_unsafe: true`; use bubblewrap or SandboxFusion for untrusted code.
"""

from __future__ import annotations

import signal
import warnings
from collections.abc import Mapping
from pathlib import Path

from sandbox.local import LocalSandbox, ResourceLimits, default_pythons, require_tool
from sandbox.types import SandboxUnavailableError

PRIVATE_TMP_SCRIPT = (
    # The run dir (the cwd) on /tmp first: its path may lie under /var/tmp, hidden once that is mounted.
    '"$0" --bind . /tmp && for t in /var/tmp /dev/shm; do if [ -d "$t" ]; then "$0" --bind /tmp "$t" || exit 125; '
    'fi; done && cd /tmp && HOME=/tmp TMPDIR=/tmp exec "$@"'
)
"""`sh -c` script (`$0` is `mount`) run as root inside the new mount namespace (private propagation:
the host never sees these mounts): the world-writable temp dirs become the run's own dir, then the
rest runs."""
PROCESS_SANDBOX_WARNING = (
    "process sandbox: the program is NOT cut off from the network or the filesystem "
    "(install bubblewrap, or use a SandboxFusion server, for untrusted code)"
)


class ProcessSandbox(LocalSandbox):
    """Runs `python main.py` in a private temp dir; `python` defaults to the first interpreter
    the sandbox uid can execute."""

    launcher_prefixes = ("prlimit: ", "setpriv: ", "mount: ", "unshare: ")

    def __init__(self, concurrency: int = 4, limits: ResourceLimits | None = None, python: str | None = None) -> None:
        super().__init__(concurrency, limits or ResourceLimits())
        warnings.warn(PROCESS_SANDBOX_WARNING, stacklevel=2)
        self.guard = require_tool("setpriv")
        self.unshare = require_tool("unshare") if self.uids.enabled else ""
        self.mount = require_tool("mount") if self.uids.enabled else ""
        self.sh = require_tool("sh") if self.uids.enabled else ""
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

    def command(self, workdir: Path, uid: int | None, mounts: Mapping[str, str] | None = None) -> list[str]:
        if mounts:
            raise ValueError("the process sandbox cannot show dirs at fixed paths (Program.mounts): use bubblewrap")
        # After the uid drop (a credential change clears the parent-death signal): the program is
        # SIGKILLed when the trainer dies, and neither it nor its children gain privileges.
        argv = self.launcher(uid)
        at = argv.index(self.python)
        argv = [*argv[:at], self.guard, "--pdeathsig=KILL", "--no-new-privs", "--", *argv[at:]]
        if uid is None:
            return argv
        # Root: pid, network and mount namespaces of its own, with a fresh /proc. Other processes
        # (and their command lines) are out of sight, there is no network but a loopback that is
        # down, the temp dirs are the run's own, and when the namespace's first process dies (the
        # trainer died: parent-death signals down the chain) the kernel kills every process left in it.
        namespace = [self.unshare, "--pid", "--net", "--fork", "--kill-child=SIGKILL", "--mount-proc", "--"]
        private_tmp = [self.sh, "-c", PRIVATE_TMP_SCRIPT, self.mount]
        return [self.guard, "--pdeathsig=KILL", "--", *namespace, *private_tmp, *argv]

    def cpu_limit_codes(self) -> set[int]:
        return {-signal.SIGXCPU}
