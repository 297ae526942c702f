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
import fcntl
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import weakref
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from sandbox.cgroup import RunGroup, RunGroups, find_parent
from sandbox.types import (
    MAIN_FILE,
    OUTPUT_CAP_BYTES,
    Program,
    RunResult,
    Sandbox,
    SandboxUnavailableError,
)

# Uid blocks far above any real account: base + block * UID_BLOCK_SIZE + slot.
UID_BASE = 2_000_000_000
UID_BLOCKS = 10_000
UID_BLOCK_SIZE = 10_000
UID_LOCK_DIR = "kitchen-sandbox-uid-blocks"
"""Under the temp dir: one lock file per block, flock-ed by the pool that uses it, so no two pools
(in one process or in several) ever share a uid; the kernel drops a dead process's locks."""
UID_SETTLE_S = 5.0
"""How long to wait for a run's killed processes to be reaped before its uid is reused."""
READER_GRACE_S = 2.0
"""How long output may still drain after the program and its leftovers were killed."""
MEMORY_POLL_S = 0.05
"""How often the run's total resident memory is measured against `ResourceLimits.memory_bytes`."""


@dataclass(frozen=True)
class ResourceLimits:
    """Per-process rlimits for the sandboxed program (applied with `prlimit`)."""

    cpu_s: int = 10
    address_space_bytes: int = 1 << 30
    processes: int = 64
    """Tasks (processes and threads) of the run's uid; only enforced for a non-root uid."""
    file_size_bytes: int = 64 << 20
    open_files: int = 64
    memory_bytes: int = 2 << 30
    """Memory of all the run's processes together. Where cgroup v2 hands the memory and pids
    controllers to the trainer it is the run's `memory.max` (sandbox.cgroup); elsewhere a
    watchdog sums the resident memory of the run's uid (root trainer) or session (otherwise)
    every MEMORY_POLL_S and kills the run above it, and the hard bound is `processes x
    address_space_bytes`, which `total_bound` states."""

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value < 1:
                raise ValueError(f"sandbox limit {name} must be at least 1, got {value}")

    def total_bound(self) -> str:
        """The limits on the run's memory as a whole, in words."""
        hard = self.processes * self.address_space_bytes
        return (
            f"{self.memory_bytes / 2**30:.3g} GiB resident in total (watchdog, every {MEMORY_POLL_S:g} s); "
            f"at most {self.processes} processes x {self.address_space_bytes / 2**30:.3g} GiB address space "
            f"= {hard / 2**30:.3g} GiB"
        )

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


def claim_uid_block() -> tuple[int, int]:
    """(block, lock fd): the first free uid block, starting from one picked by the pid; the block is
    this caller's while the fd stays open."""
    folder = Path(tempfile.gettempdir()) / UID_LOCK_DIR
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise SandboxUnavailableError(f"sandbox uid locks: {folder} must be a directory only this user can write")
    start = os.getpid() % UID_BLOCKS
    for offset in range(UID_BLOCKS):
        block = (start + offset) % UID_BLOCKS
        fd = os.open(folder / f"{block}.lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return block, fd
    raise SandboxUnavailableError(f"sandbox uid locks: all {UID_BLOCKS} uid blocks are in use")


class UidPool:
    """One unprivileged uid per concurrent run, or none when the trainer is not root. Each pool
    holds a uid block of its own (see UID_LOCK_DIR) for as long as it lives."""

    def __init__(self, size: int) -> None:
        self.enabled = os.geteuid() == 0
        self._free: list[int] = []
        if self.enabled:
            if size > UID_BLOCK_SIZE:
                raise ValueError(f"sandbox concurrency {size} exceeds the uid block size {UID_BLOCK_SIZE}")
            block, fd = claim_uid_block()
            weakref.finalize(self, os.close, fd)
            first = UID_BASE + block * UID_BLOCK_SIZE
            self._free = [first + slot for slot in range(size)]

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
    for source in program.mounts.values():
        (workdir / source).mkdir(parents=True, exist_ok=True)
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


def _resident_bytes(pid: str, uid: int | None, session: int) -> int:
    """`pid`'s resident memory when it holds `uid` (or, without a uid, is in `session`), else 0."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            text = status.read()
        if uid is None:
            with open(f"/proc/{pid}/stat", "rb") as stat_file:
                fields = stat_file.read().rsplit(b")", 1)[1].split()
            if int(fields[3]) != session:  # after the comm: state, ppid, pgrp, session
                return 0
    except (OSError, IndexError, ValueError):
        return 0
    rss = 0
    for line in text.splitlines():
        if line.startswith(b"Uid:") and uid is not None and str(uid).encode() not in line.split()[1:4]:
            return 0
        if line.startswith(b"VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return rss


def resident_bytes(uid: int | None, session: int) -> int:
    """Resident memory of every process of `uid` (root trainer) or of `session` (otherwise)."""
    return sum(_resident_bytes(name, uid, session) for name in os.listdir("/proc") if name.isdigit())


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
    memory_killed: int | None = None
    """The run's total resident bytes when the memory watchdog killed it; None when it did not."""


async def _watch_memory(exited: asyncio.Future[None], usage: Callable[[], int], limit: int) -> int | None:
    """Poll `usage` until the child exits; the first reading above `limit`, or None."""
    while not exited.done():
        used = await asyncio.to_thread(usage)
        if used > limit:
            return used
        await asyncio.wait([exited], timeout=MEMORY_POLL_S)
    return None


async def supervise(
    argv: Sequence[str],
    cwd: Path,
    env: dict[str, str],
    stdin: str,
    timeout_s: float,
    sweep: Callable[[], Awaitable[None]],
    memory: tuple[Callable[[int], int], int] | None = None,
) -> Outcome:
    """Run `argv` in its own session; on exit, the deadline, cancellation or (with `memory`, a
    function of the session id giving the run's resident bytes, and their limit) too much memory,
    SIGKILL its process group and `sweep` what escaped the group, then give the output pipes a
    moment to drain."""
    loop = asyncio.get_running_loop()
    start = time.monotonic()
    transport, child = await loop.subprocess_exec(_Child, *argv, cwd=cwd, env=env, start_new_session=True)
    timed_out = False
    memory_killed: int | None = None
    try:
        stdin_pipe = transport.get_pipe_transport(0)
        assert isinstance(stdin_pipe, asyncio.WriteTransport)
        stdin_pipe.write(stdin.encode("utf-8"))
        stdin_pipe.write_eof()
        waits: list[asyncio.Future[object]] = [asyncio.shield(child.exited)]
        if memory is not None:
            usage, limit = memory
            session = transport.get_pid()
            waits.append(asyncio.ensure_future(_watch_memory(child.exited, lambda: usage(session), limit)))
        done, pending = await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if not done:
            timed_out = True
        elif memory is not None and waits[1] in done:
            memory_killed = waits[1].result()  # type: ignore[assignment]
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the group may already be empty
            os.killpg(transport.get_pid(), signal.SIGKILL)
        await sweep()
        elapsed = time.monotonic() - start
        await asyncio.wait([child.exited, child.pipes_closed], timeout=READER_GRACE_S)
        transport.close()
    return Outcome(transport.get_returncode(), child.stdout, child.stderr, elapsed, timed_out, memory_killed)


def classify(outcome: Outcome, cpu_limit_codes: set[int], launcher_prefixes: Sequence[str], cpu_s: int) -> RunResult:
    """Status from the exit: deadline or CPU limit = timeout; a launcher's own error = sandbox_error."""
    code = outcome.exit_code
    stderr = outcome.stderr.text()
    if outcome.timed_out:
        status, detail = "timeout", f"wall-clock limit of {outcome.elapsed_s:.1f} s reached"
    elif outcome.memory_killed is not None:
        status, detail = "failed", f"memory limit reached: killed at {outcome.memory_killed / 2**20:.0f} MiB resident"
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
        memory_killed=outcome.memory_killed is not None,
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
        self.memory_kills = 0
        """Runs killed for holding more than `limits.memory_bytes` in total."""
        parent, self.no_cgroup_reason = find_parent()
        self.cgroups: RunGroups | None = None
        if parent is not None:
            try:
                self.cgroups = RunGroups(parent, limits.memory_bytes, limits.processes)
            except OSError as exc:
                self.no_cgroup_reason = f"cgroup v2: could not make a group under {parent} ({exc.strerror})"
        if self.cgroups is not None:
            self.shell = require_tool("sh")
            weakref.finalize(self, self.cgroups.close)

    def total_limits(self) -> str:
        """How a run's memory and processes are bounded all together here, in words."""
        if self.cgroups is not None:
            return self.cgroups.describe()
        return f"{self.no_cgroup_reason}; instead: {self.limits.total_bound()}"

    @abstractmethod
    def command(self, workdir: Path, uid: int | None, mounts: Mapping[str, str] | None = None) -> list[str]:
        """The full argv that runs `main.py` in `workdir` (the cwd of the spawned process), with
        `mounts` (see `Program.mounts`) shown; ValueError where this sandbox cannot show them."""

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
        group: RunGroup | None = None
        oom_killed: int | None = None

        async def sweep() -> None:
            nonlocal oom_killed
            if group is not None:  # read how it ended before the group goes
                if group.oom_killed():
                    oom_killed = group.peak_bytes() or self.limits.memory_bytes
                await asyncio.to_thread(group.remove)
            if uid is not None:
                await kill_uid(uid)

        try:
            workdir = await asyncio.to_thread(make_workdir, program, uid)
            try:
                argv = self.command(workdir, uid, program.mounts)
            except ValueError as exc:
                return RunResult("sandbox_error", None, "", "", 0.0, detail=str(exc))
            memory: tuple[Callable[[int], int], int] | None = None
            if self.cgroups is not None:  # the kernel holds the limit: no watchdog
                group = await asyncio.to_thread(self.cgroups.create)
                argv = [*group.enter(self.shell), *argv]
            else:
                memory = (partial(resident_bytes, uid), self.limits.memory_bytes)
            env = minimal_env(str(workdir))
            try:
                outcome = await supervise(argv, workdir, env, program.stdin, timeout_s, sweep, memory)
            except OSError as exc:
                return RunResult("sandbox_error", None, "", "", 0.0, detail=f"could not start the sandbox: {exc}")
            if oom_killed is not None:
                outcome = replace(outcome, memory_killed=oom_killed)
            if outcome.memory_killed is not None:
                self.memory_kills += 1
            return classify(outcome, self.cpu_limit_codes(), self.launcher_prefixes, self.limits.cpu_s)
        finally:
            if group is not None:  # already gone unless the program never started
                await asyncio.to_thread(group.remove)
            if workdir is not None:
                await asyncio.to_thread(shutil.rmtree, workdir, True)
            self.uids.give_back(uid)
