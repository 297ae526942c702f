"""What the two local sandboxes share: resource limits, the uid drop, and supervising one child.

Why a uid drop: RLIMIT_NPROC does not apply to root, so a fork bomb started by a root trainer
would take the machine down. When the trainer is root, each concurrent run gets its own unused
unprivileged uid (`setpriv`), so the process limit holds, runs cannot signal each other, and
every process a run left behind can be killed by uid afterwards (the trainer scans /proc for the
uid and SIGKILLs what it finds), even ones that escaped the process group with `setsid`. A
non-root trainer cannot change uid; the rlimits still apply to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kitchen.sandbox.types import (
    MAIN_FILE,
    OUTPUT_CAP_BYTES,
    Program,
    RunResult,
    Sandbox,
    SandboxUnavailableError,
)

# Per-process uid block far above any real account: base + (pid mod 10000) * 10000 + slot.
UID_BASE = 2_000_000_000
UID_SETTLE_S = 5.0
"""How long to wait for a run's killed processes to be reaped before its uid is reused."""
READER_GRACE_S = 2.0
"""How long output may still drain after the program and its leftovers were killed."""


@dataclass(frozen=True)
class ResourceLimits:
    """Per-process rlimits for the sandboxed program (applied with `prlimit`)."""

    cpu_s: int = 10
    address_space_bytes: int = 1 << 30
    processes: int = 64
    """Tasks (processes and threads) of the run's uid; only enforced for a non-root uid."""
    file_size_bytes: int = 64 << 20
    open_files: int = 64

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value < 1:
                raise ValueError(f"sandbox limit {name} must be at least 1, got {value}")

    def prlimit_args(self) -> list[str]:
        return [
            f"--cpu={self.cpu_s}:{self.cpu_s + 1}",  # SIGXCPU at the soft limit, SIGKILL a second later
            f"--as={self.address_space_bytes}",
            f"--nproc={self.processes}",
            f"--fsize={self.file_size_bytes}",
            f"--nofile={self.open_files}",
            "--core=0",
        ]


def default_pythons() -> list[str]:
    """The trainer's own base interpreter first (sandboxed code gets its stdlib, not the venv),
    then system ones, for when a dropped uid cannot reach the first (e.g. it lives under /root)."""
    found = [os.path.realpath(sys.executable)]
    found += [os.path.realpath(p) for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)]
    return list(dict.fromkeys(found))


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SandboxUnavailableError(f"the sandbox needs `{name}` on PATH (util-linux); install it")
    return path


class UidPool:
    """One unprivileged uid per concurrent run, or none when the trainer is not root."""

    def __init__(self, size: int) -> None:
        self.enabled = os.geteuid() == 0
        first = UID_BASE + (os.getpid() % 10_000) * 10_000
        self._free = [first + slot for slot in range(size)] if self.enabled else []

    def take(self) -> int | None:
        """A free uid; callers hold the sandbox's concurrency gate, so one is always free."""
        return self._free.pop() if self.enabled else None

    def give_back(self, uid: int | None) -> None:
        if uid is not None:
            self._free.append(uid)


def drop_to(uid: int, setpriv: str) -> list[str]:
    """Command prefix that runs the rest as `uid` with no groups, capabilities or new privileges."""
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--no-new-privs", "--"]


def minimal_env(workdir: str) -> dict[str, str]:
    """The only environment a sandboxed program sees: nothing of the trainer's (no API keys)."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}


def make_workdir(program: Program, uid: int | None) -> Path:
    """A fresh private dir holding the program's files, owned by the run's uid."""
    workdir = Path(tempfile.mkdtemp(prefix="kitchen-sandbox-"))
    files: dict[str, str | bytes] = {MAIN_FILE: program.code, **program.files}
    for name, content in files.items():
        path = workdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    if uid is not None:
        for path in [workdir, *workdir.rglob("*")]:
            os.chown(path, uid, uid)
    return workdir


class _CappedOutput:
    """Keeps the first `cap` bytes of a stream and drops (but notes) the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        self.data += chunk[: max(room, 0)]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class _Child(asyncio.SubprocessProtocol):
    """Collects capped output and says when the process exits, whoever still holds its pipes
    (asyncio's `Process.wait` would also wait for a leftover daemon to close them)."""

    def __init__(self) -> None:
        self.stdout = _CappedOutput(OUTPUT_CAP_BYTES)
        self.stderr = _CappedOutput(OUTPUT_CAP_BYTES)
        loop = asyncio.get_running_loop()
        self.exited = loop.create_future()
        self.pipes_closed = loop.create_future()
        self._open_pipes = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        (self.stdout if fd == 1 else self.stderr).add(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open_pipes.discard(fd)
        if not self._open_pipes and not self.pipes_closed.done():
            self.pipes_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def _holds_uid(pid: str, uid: int) -> bool:
    """Whether /proc says `pid` has `uid` as its real, effective or saved uid (the ids a kill(2) by
    that uid would match). /proc/PID/status, not the owner of /proc/PID: a process that made itself
    non-dumpable shows root as that owner."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"Uid:"):
                    return str(uid).encode() in line.split()[1:4]
    except OSError:  # gone meanwhile
        pass
    return False


def uid_processes(uid: int) -> list[str]:
    """The pids (zombies included) that hold `uid`."""
    return [name for name in os.listdir("/proc") if name.isdigit() and _holds_uid(name, uid)]


def _kill_pid(pid: str, uid: int) -> None:
    """SIGKILL `pid` through a pidfd, after checking it still holds `uid`: a pid that was reused
    by another process between the scan and the kill is never signalled."""
    try:
        fd = os.pidfd_open(int(pid))
    except OSError:  # gone meanwhile
        return
    try:
        if _holds_uid(pid, uid):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


def kill_uid_now(uid: int, settle_s: float = UID_SETTLE_S) -> None:
    """SIGKILL every process of `uid` (the trainer is root), wherever it moved its session, and
    repeat until nothing of it is left, zombies included (they still count against RLIMIT_NPROC,
    so a run after a fork bomb would otherwise start without its process allowance). A fork in
    flight during one scan is caught by the next; the uid's process limit bounds how many there
    can be. In-process: no helper interpreter to start, and usually one /proc scan finding nothing."""
    end = time.monotonic() + settle_s
    while True:
        left = uid_processes(uid)
        if not left or time.monotonic() > end:
            return
        for pid in left:
            _kill_pid(pid, uid)
        time.sleep(0.005)


async def kill_uid(uid: int) -> None:
    """`kill_uid_now` off the event loop."""
    await asyncio.to_thread(kill_uid_now, uid)


@dataclass(frozen=True)
class Outcome:
    """A supervised child's ending, before a sandbox reads meaning into its exit code."""

    exit_code: int | None
    stdout: _CappedOutput
    stderr: _CappedOutput
    elapsed_s: float
    timed_out: bool


async def supervise(
    argv: Sequence[str],
    cwd: Path,
    env: dict[str, str],
    stdin: str,
    timeout_s: float,
    sweep: Callable[[], Awaitable[None]],
) -> Outcome:
    """Run `argv` in its own session; on exit, the deadline or cancellation SIGKILL its process
    group and `sweep` what escaped the group, then give the output pipes a moment to drain."""
    loop = asyncio.get_running_loop()
    start = time.monotonic()
    transport, child = await loop.subprocess_exec(_Child, *argv, cwd=cwd, env=env, start_new_session=True)
    timed_out = False
    try:
        stdin_pipe = transport.get_pipe_transport(0)
        assert isinstance(stdin_pipe, asyncio.WriteTransport)
        stdin_pipe.write(stdin.encode("utf-8"))
        stdin_pipe.write_eof()
        try:
            await asyncio.wait_for(asyncio.shield(child.exited), timeout_s)
        except TimeoutError:
            timed_out = True
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the group may already be empty
            os.killpg(transport.get_pid(), signal.SIGKILL)
        await sweep()
        elapsed = time.monotonic() - start
        await asyncio.wait([child.exited, child.pipes_closed], timeout=READER_GRACE_S)
        transport.close()
    return Outcome(transport.get_returncode(), child.stdout, child.stderr, elapsed, timed_out)


def classify(outcome: Outcome, cpu_limit_codes: set[int], launcher_prefixes: Sequence[str], cpu_s: int) -> RunResult:
    """Status from the exit: deadline or CPU limit = timeout; a launcher's own error = sandbox_error."""
    code = outcome.exit_code
    stderr = outcome.stderr.text()
    if outcome.timed_out:
        status, detail = "timeout", f"wall-clock limit of {outcome.elapsed_s:.1f} s reached"
    elif code in cpu_limit_codes:
        status, detail = "timeout", f"CPU limit of {cpu_s} s reached"
    elif code != 0 and stderr.startswith(tuple(launcher_prefixes)):
        status, detail = "sandbox_error", stderr.splitlines()[0]
    else:
        status, detail = ("ok" if code == 0 else "failed"), ""
    return RunResult(
        status=status,  # type: ignore[arg-type]
        exit_code=code,
        stdout=outcome.stdout.text(),
        stderr=stderr,
        elapsed_s=outcome.elapsed_s,
        stdout_truncated=outcome.stdout.truncated,
        stderr_truncated=outcome.stderr.truncated,
        detail=detail,
    )


class LocalSandbox(Sandbox):
    """A sandbox that runs `python main.py` as a child of this process, under rlimits and a uid drop."""

    launcher_prefixes: tuple[str, ...] = ("prlimit: ", "setpriv: ")
    """How the launcher tools start their own error messages: such a failure is a sandbox_error."""

    def __init__(self, concurrency: int, limits: ResourceLimits) -> None:
        super().__init__(concurrency)
        self.limits = limits
        self.python = ""
        self.prlimit = require_tool("prlimit")
        self.uids = UidPool(concurrency)
        self.setpriv = require_tool("setpriv") if self.uids.enabled else ""

    @abstractmethod
    def command(self, workdir: Path, uid: int | None) -> list[str]:
        """The full argv that runs `main.py` in `workdir` (the cwd of the spawned process)."""

    @abstractmethod
    def cpu_limit_codes(self) -> set[int]:
        """Exit codes that mean the CPU-seconds limit killed the program."""

    def launcher(self, uid: int | None) -> list[str]:
        """rlimits, then (root only) the uid drop, then the interpreter."""
        drop = drop_to(uid, self.setpriv) if uid is not None else []
        return [self.prlimit, *self.limits.prlimit_args(), "--", *drop, self.python, "-E", "-s", MAIN_FILE]

    def probe(self) -> str | None:
        """Run a trivial program once, synchronously (at construction): why it failed, or None."""
        uid = self.uids.take()
        # The interpreter must also reach itself (child processes of the program re-run it).
        workdir = make_workdir(
            Program("import os, sys\nprint('ok' if os.access(sys.executable, os.X_OK) else '')"), uid
        )
        try:
            done = subprocess.run(
                self.command(workdir, uid),
                cwd=workdir,
                env=minimal_env(str(workdir)),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            self.uids.give_back(uid)
        if done.returncode != 0 or done.stdout.strip() != b"ok":
            return done.stderr.decode("utf-8", errors="replace").strip() or f"exit code {done.returncode}"
        return None

    async def _run(self, program: Program, timeout_s: float) -> RunResult:
        if program.language != "python":
            raise ValueError(f"local sandboxes run python only, not {program.language!r} (use sandboxfusion)")
        uid = self.uids.take()
        workdir: Path | None = None

        async def sweep() -> None:
            if uid is not None:
                await kill_uid(uid)

        try:
            workdir = await asyncio.to_thread(make_workdir, program, uid)
            argv = self.command(workdir, uid)
            try:
                outcome = await supervise(argv, workdir, minimal_env(str(workdir)), program.stdin, timeout_s, sweep)
            except OSError as exc:
                return RunResult("sandbox_error", None, "", "", 0.0, detail=f"could not start the sandbox: {exc}")
            return classify(outcome, self.cpu_limit_codes(), self.launcher_prefixes, self.limits.cpu_s)
        finally:
            if workdir is not None:
                await asyncio.to_thread(shutil.rmtree, workdir, True)
            self.uids.give_back(uid)
