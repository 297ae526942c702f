"""A sandboxed run's memory and processes are bounded all together: by a cgroup v2 group of its own
where the kernel hands the trainer the memory and pids controllers, else by the process cap x the
per-process address-space cap plus the resident-memory watchdog; either way the sandbox says
which, and counts its memory kills."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import pytest

from sandbox import Program, ResourceLimits, bubblewrap_unavailable_reason
from sandbox.bubblewrap import BubblewrapSandbox
from sandbox.cgroup import cgroup2_mount, find_parent, own_group
from sandbox.local import LocalSandbox
from sandbox.process import ProcessSandbox

PARENT, NO_CGROUP_REASON = find_parent()
LIMITS = ResourceLimits(cpu_s=5, address_space_bytes=1 << 30, processes=32, memory_bytes=256 << 20)
# Eight processes, each under its own 1 GiB address-space cap, holding 96 MiB each: 768 MiB in all.
EIGHT_PROCESSES = """
import os, time
for _ in range(8):
    if os.fork() == 0:
        held = bytearray(96 << 20)
        for i in range(0, len(held), 4096):
            held[i] = 1
        time.sleep(8)
        os._exit(0)
time.sleep(8)
print("all held")
"""


def make(kind: str, limits: ResourceLimits = LIMITS) -> LocalSandbox:
    if kind == "bubblewrap":
        reason = bubblewrap_unavailable_reason()
        if reason is not None:
            pytest.skip(f"bubblewrap cannot run here: {reason}")
        return BubblewrapSandbox(concurrency=1, limits=limits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the process sandbox's warning (tests/code_sandbox/test_adversarial.py)
        return ProcessSandbox(concurrency=1, limits=limits)


def test_the_cgroup_v2_mount_and_group_are_read_from_proc() -> None:
    mountinfo = (
        "30 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n"
    )
    assert cgroup2_mount(mountinfo) == ("/sys/fs/cgroup/unified", "/")
    assert cgroup2_mount("30 1 8:1 / / rw - ext4 /dev/sda1 rw\n") is None
    assert own_group("4:memory:/a\n0::/user.slice/kitchen.scope\n") == "/user.slice/kitchen.scope"
    assert own_group("4:memory:/a\n") is None


@pytest.mark.parametrize("kind", ["bubblewrap", "process"])
def test_the_sandbox_states_how_its_runs_are_bounded_in_total(kind: str) -> None:
    stated = make(kind).total_limits()
    if PARENT is not None:
        assert stated.startswith("cgroup v2") and "memory.max 0.25 GiB" in stated and "pids.max 32" in stated
    else:  # why there is no cgroup, and the fallback's bounds
        assert stated.startswith(NO_CGROUP_REASON) and NO_CGROUP_REASON
        assert "0.25 GiB resident in total (watchdog" in stated
        assert "32 processes x 1 GiB address space = 32 GiB" in stated


@pytest.mark.slow  # 8 processes touching 96 MiB each, per sandbox
@pytest.mark.parametrize("kind", ["bubblewrap", "process"])
def test_many_processes_cannot_add_up_past_the_total(kind: str) -> None:
    sandbox = make(kind)
    result = asyncio.run(sandbox.run(Program(EIGHT_PROCESSES), 20))
    assert result.status == "failed" and "memory limit reached" in result.detail, result
    assert "all held" not in result.stdout
    assert sandbox.memory_kills == 1 and result.memory_killed
    if sandbox.cgroups is not None:  # the run's group was killed and removed; the sandbox's folder stays
        assert not [path for path in sandbox.cgroups.folder.iterdir() if path.is_dir()]


@pytest.mark.skipif(PARENT is None, reason=f"no cgroup v2 memory and pids controllers here: {NO_CGROUP_REASON}")
@pytest.mark.parametrize("kind", ["bubblewrap", "process"])
def test_a_cgroup_caps_the_run_s_tasks_and_is_removed_afterwards(kind: str) -> None:
    sandbox = make(kind)
    assert sandbox.cgroups is not None
    code = """
import os, time
ok = 0
for _ in range(100):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    ok += 1
print(ok, open("/proc/self/cgroup").read().strip())
"""
    result = asyncio.run(sandbox.run(Program(code), 20))
    assert result.status == "ok", result
    assert int(result.stdout.split()[0]) < LIMITS.processes
    folder = sandbox.cgroups.folder
    assert not [path for path in folder.iterdir() if path.is_dir()]  # no run group left behind
    sandbox.cgroups.close()
    assert not Path(folder).exists()
