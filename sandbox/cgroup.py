"""Per-run cgroup v2 groups: the kernel bounds a sandboxed run's memory and tasks in total.

Where the trainer's own cgroup v2 group can hand the `memory` and `pids` controllers down (the
unified hierarchy's root, or a group delegated to the trainer with them in `subtree_control`),
each sandbox makes a folder of its own under it and each run a group in that folder with
`memory.max`, `memory.swap.max = 0`, `pids.max` and `memory.oom.group = 1`: above the limit the
kernel kills every process of the run at once, and no process of it can fork past the count. The
program enters its group before it runs (the launcher writes its own pid into `cgroup.procs` and
then execs), so nothing it starts is ever outside it. After the run the group is killed
(`cgroup.kill`) and removed.

Elsewhere (cgroup v1 machines, or v2 without those controllers delegated) `find_parent` says why,
and the sandbox falls back to its rlimits and resident-memory watchdog (sandbox.local).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CONTROLLERS = ("memory", "pids")
SETTLE_S = 5.0
"""How long a killed run's group may take to empty before it is left behind (and said so)."""
ENTER_SCRIPT = 'echo 0 > "$0" && exec "$@"'
"""`sh -c` script: move this shell into the group whose `cgroup.procs` is `$0`, then exec the rest."""


def cgroup2_mount(mountinfo: str) -> tuple[str, str] | None:
    """(mount point, root of the hierarchy it shows) of the first cgroup2 mount in `mountinfo`
    (the text of /proc/self/mountinfo), or None."""
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if after and after[0] == "cgroup2":
            return fields[4], fields[3]
    return None


def own_group(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path (the `0::PATH` line of /proc/self/cgroup), or None."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def find_parent() -> tuple[Path | None, str]:
    """The trainer's own cgroup v2 group when runs can get memory and pids limits under it, with
    "" as the reason; else None and why not."""
    mount = cgroup2_mount(_read(Path("/proc/self/mountinfo")))
    group = own_group(_read(Path("/proc/self/cgroup")))
    if mount is None or group is None:
        return None, "no cgroup v2 hierarchy (cgroup v1 only)"
    point, root = mount
    relative = group[len(root) :] if root != "/" and group.startswith(root) else group
    parent = Path(point) / relative.lstrip("/")
    available = _read(parent / "cgroup.controllers").split()
    missing = [name for name in CONTROLLERS if name not in available]
    if missing:
        shown = " ".join(available) or "none"
        return None, (
            f"cgroup v2 at {parent} has no {' or '.join(missing)} controller (available: {shown}; on a hybrid "
            "machine they belong to the v1 hierarchy)"
        )
    if not all(name in _read(parent / "cgroup.subtree_control").split() for name in CONTROLLERS):
        try:
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{name}" for name in CONTROLLERS))
        except OSError as exc:
            return None, (
                f"cgroup v2 at {parent} does not hand memory and pids to its children and cannot be made to "
                f"({exc.strerror}: it holds processes, or is not delegated to this user)"
            )
    if not os.access(parent, os.W_OK):
        return None, f"cgroup v2 at {parent} is not writable by this user (not delegated)"
    return parent, ""


@dataclass(frozen=True)
class RunGroup:
    """One run's cgroup."""

    path: Path

    def enter(self, shell: str) -> list[str]:
        """Command prefix that runs the rest inside this group."""
        return [shell, "-c", ENTER_SCRIPT, str(self.path / "cgroup.procs")]

    def _events(self, name: str) -> dict[str, int]:
        counts = {}
        for line in _read(self.path / name).splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                counts[key] = int(value)
        return counts

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the run for going over `memory.max`."""
        return self._events("memory.events").get("oom_kill", 0) > 0

    def peak_bytes(self) -> int | None:
        """The run's peak memory (`memory.peak`, Linux 5.19+), or None where the kernel lacks it."""
        text = _read(self.path / "memory.peak").strip()
        return int(text) if text.isdigit() else None

    def remove(self, settle_s: float = SETTLE_S) -> bool:
        """Kill whatever is left in the group and remove it; False if it would not empty in time."""
        end = time.monotonic() + settle_s
        while True:
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > end:
                    return False
            try:
                (self.path / "cgroup.kill").write_text("1")
            except OSError:  # before Linux 5.14: one by one
                for pid in _read(self.path / "cgroup.procs").split():
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.01)


class RunGroups:
    """A sandbox's folder of per-run groups, under the trainer's cgroup `parent`: each run gets
    `memory_bytes` of memory (swap none) and `tasks` processes and threads, all together."""

    def __init__(self, parent: Path, memory_bytes: int, tasks: int) -> None:
        self.folder = parent / f"kitchen-sandbox-{os.getpid()}-{secrets.token_hex(4)}"
        self.folder.mkdir()
        try:
            (self.folder / "cgroup.subtree_control").write_text(" ".join(f"+{name}" for name in CONTROLLERS))
        except OSError:
            self.folder.rmdir()
            raise
        self.memory_bytes = memory_bytes
        self.tasks = tasks

    def create(self) -> RunGroup:
        group = RunGroup(self.folder / f"run-{secrets.token_hex(6)}")
        group.path.mkdir()
        try:
            (group.path / "memory.max").write_text(str(self.memory_bytes))
            if (group.path / "memory.swap.max").exists():
                (group.path / "memory.swap.max").write_text("0")
            (group.path / "memory.oom.group").write_text("1")
            (group.path / "pids.max").write_text(str(self.tasks))
        except OSError:
            group.remove()
            raise
        return group

    def close(self) -> None:
        """Remove the (by now empty) folder; runs still going keep it until they end."""
        with contextlib.suppress(OSError):
            self.folder.rmdir()

    def describe(self) -> str:
        return (
            f"cgroup v2 ({self.folder}): memory.max {self.memory_bytes / 2**30:.3g} GiB (no swap) and pids.max "
            f"{self.tasks} per run, all its processes together, kernel-enforced"
        )
