"""Hostile programs through each local sandbox: each must be contained, get the right status, leave
nothing behind, and earn no reward through the grading harness."""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from recipes.envs.code import CodeProblem, grade_code
from sandbox import Program, ResourceLimits, RunResult, Sandbox, bubblewrap_unavailable_reason
from sandbox.bubblewrap import BubblewrapSandbox
from sandbox.local import LocalSandbox
from sandbox.process import ProcessSandbox

LIMITS = ResourceLimits(cpu_s=3, address_space_bytes=1 << 30, processes=64, file_size_bytes=16 << 20)
ROOT = os.geteuid() == 0
PROJECT_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["bubblewrap", "process"])
def sandbox(request: pytest.FixtureRequest) -> LocalSandbox:
    if request.param == "bubblewrap":
        reason = bubblewrap_unavailable_reason()
        if reason is not None:
            pytest.skip(f"bubblewrap cannot run here: {reason}")
        return BubblewrapSandbox(concurrency=2, limits=LIMITS)
    with pytest.warns(UserWarning, match="NOT cut off"):
        return ProcessSandbox(concurrency=2, limits=LIMITS)


def run(sandbox: Sandbox, code: str, timeout_s: float = 5.0, stdin: str = "") -> RunResult:
    return asyncio.run(sandbox.run(Program(code, stdin=stdin), timeout_s))


def processes_matching(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def uid_processes(sandbox: LocalSandbox) -> list[int]:
    """Live processes owned by the sandbox's uids (root trainers only)."""
    uids = {str(uid) for uid in sandbox.uids._free}
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
            if uid_line.split()[1] in uids and "State:\tZ" not in status:
                found.append(int(entry.name))
    return found


def settle(check: Callable[[], list[int]], deadline_s: float = 5.0) -> list[int]:
    """Poll `check` until it is empty (SIGKILLed processes take a moment to exit)."""
    end = time.monotonic() + deadline_s
    while (left := check()) and time.monotonic() < end:
        time.sleep(0.05)
    return left


def assert_still_works(sandbox: Sandbox) -> None:
    result = run(sandbox, "print(6 * 7)")
    assert result.status == "ok" and result.stdout == "42\n"


def test_bounded_fork_count_is_capped(sandbox: LocalSandbox) -> None:
    if not ROOT and isinstance(sandbox, ProcessSandbox):
        pass  # non-root: RLIMIT_NPROC applies to the trainer's own uid, still bounded
    code = """
import os, time
ok = 0
for _ in range(300):
    try:
        pid = os.fork()
    except OSError:
        continue
    if pid == 0:
        time.sleep(1)
        os._exit(0)
    ok += 1
print(ok)
"""
    result = run(sandbox, code)
    assert result.status == "ok", result
    assert int(result.stdout) < LIMITS.processes


def test_fork_bomb(sandbox: LocalSandbox) -> None:
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = run(sandbox, code, timeout_s=2)
    assert result.status == "timeout"
    if ROOT:
        assert settle(lambda: uid_processes(sandbox)) == []
    assert_still_works(sandbox)


def test_memory_bomb(sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n"
    # Filling 1 GiB takes well under a second of CPU on a warm machine, but many seconds of wall
    # time on a loaded one, and more CPU where the memory was never touched since the machine
    # booted (a fresh virtual machine's host faults each page in; on one such machine this run,
    # under a 3 s CPU limit, ended as a timeout): a generous deadline and CPU limit, so what is
    # tested is the memory limit.
    monkeypatch.setattr(sandbox, "limits", replace(LIMITS, cpu_s=60))
    result = run(sandbox, code, timeout_s=120)
    assert result.status == "failed" and "MemoryError" in result.stderr, result


def test_infinite_loop_and_thread_spin(sandbox: LocalSandbox) -> None:
    assert run(sandbox, "while True:\n    pass\n", timeout_s=1).status == "timeout"
    spin = "import threading\ndef spin():\n    while True:\n        pass\n"
    spin += "for _ in range(4):\n    threading.Thread(target=spin).start()\n"
    result = run(sandbox, spin, timeout_s=1)
    assert result.status == "timeout", result


def test_ten_gigabyte_write_is_stopped_by_the_file_size_limit(sandbox: LocalSandbox) -> None:
    code = (
        "block = b'x' * (1 << 20)\nwith open('big', 'wb') as f:\n    for _ in range(10240):\n        f.write(block)\n"
    )
    result = run(sandbox, code)
    assert result.status == "failed"


def test_hundred_megabytes_of_stdout_are_capped(sandbox: LocalSandbox) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = "import sys\nblock = b'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.buffer.write(block)\n"
    result = run(sandbox, code, timeout_s=20)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert result.status == "ok" and result.stdout_truncated
    assert len(result.stdout) == 64 * 1024
    assert grown_kib < 50 * 1024


def test_environment_is_not_inherited(sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = f"planted-{uuid.uuid4().hex}"
    monkeypatch.setenv("TINKER_API_KEY", planted)
    monkeypatch.setenv("SOME_SECRET", planted)
    code = """
import os
print(dict(os.environ))
for pid in (os.getppid(), 1):
    try:
        print(open(f"/proc/{pid}/environ", "rb").read())
    except OSError as e:
        print("denied", e)
"""
    result = run(sandbox, code)
    assert result.status == "ok"
    assert planted not in result.stdout and "TINKER_API_KEY" not in result.stdout
    if not ROOT and isinstance(sandbox, ProcessSandbox):
        pytest.skip("process sandbox without a uid drop: /proc/<trainer>/environ is readable (documented)")


def test_writes_outside_the_sandbox(sandbox: LocalSandbox, tmp_path: Path) -> None:
    if isinstance(sandbox, ProcessSandbox) and not ROOT:
        pytest.skip("process sandbox without a uid drop cannot protect the filesystem (documented)")
    name = f"escape-{uuid.uuid4().hex}"
    targets = {
        "home": Path.home() / name,
        "project": PROJECT_DIR / name,
        "run_dir": tmp_path / name,
        "tmp": Path("/tmp") / name,
        "var_tmp": Path("/var/tmp") / name,
        "dev_shm": Path("/dev/shm") / name,
    }
    code = "import sys\n"
    for label, path in list(targets.items()):
        if not path.parent.is_dir():
            del targets[label]
            continue
        code += f"try:\n    open({str(path)!r}, 'w').write('x')\n    print({label!r})\nexcept OSError:\n    pass\n"
    result = run(sandbox, code)
    assert result.status == "ok"
    leaked = {label for label, path in targets.items() if path.exists()}
    for label in leaked:
        targets[label].unlink()
    # Bubblewrap shows none of these; the process sandbox's temp dirs are its own run dir (removed).
    assert leaked == set()
    if isinstance(sandbox, ProcessSandbox):  # its private /tmp is writable, only no one else sees it
        assert "tmp" in result.stdout.split(), result


def test_network(sandbox: LocalSandbox) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    code = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("connected")
except OSError as e:
    print("blocked", e)
"""
    try:
        result = run(sandbox, code)
    finally:
        listener.close()
    assert result.status == "ok"
    if isinstance(sandbox, BubblewrapSandbox) or ROOT:  # root: the process sandbox's own network namespace
        assert result.stdout.startswith("blocked")
    else:  # documented: the process sandbox under a non-root trainer does not block the network
        assert result.stdout.startswith("connected")


def test_killing_the_parent(sandbox: LocalSandbox) -> None:
    if isinstance(sandbox, ProcessSandbox) and not ROOT:
        pytest.skip("process sandbox without a uid drop: the program may signal the trainer (documented)")
    result = run(sandbox, "import os\nprint(os.getppid(), flush=True)\nos.kill(os.getppid(), 9)\n")
    if isinstance(sandbox, ProcessSandbox):  # root: pid 1 of its own namespace, with no parent to see
        assert result.stdout == "0\n" and result.status == "ok", result
    else:
        assert result.status in ("failed", "sandbox_error")
    assert_still_works(sandbox)


def test_daemons_do_not_outlive_the_run(sandbox: LocalSandbox) -> None:
    if isinstance(sandbox, ProcessSandbox) and not ROOT:
        pytest.skip("process sandbox without a uid drop: a daemon in its own session escapes (documented)")
    marker = f"daemon-{uuid.uuid4().hex}"
    code = f"""
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", {marker!r}], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", {marker!r}])
    os._exit(0)
print("spawned")
"""
    result = run(sandbox, code)
    assert result.status == "ok" and "spawned" in result.stdout, result
    assert settle(lambda: processes_matching(marker)) == []


# ---- reward hacking through the grading harness -------------------------------------------------

PROBLEM = CodeProblem.from_asserts(
    "Write add_three(x).", ["assert add_three(2) == 5", "assert add_three(-3) == 0\nassert add_three(0) != 4"]
)
# The solution runs in a forked child that never holds the nonce or the report channel: it can
# only forge records through its own pipe, and those must still hold the right values.
FORGE = """
import json, os, sys
frame = sys._getframe(1)
pipe, tests = frame.f_locals["write_fd"], frame.f_locals["tests"]
for t, steps in enumerate(tests):
    for step in steps:
        if "check" in step:
            record = {"t": t, "a": step["check"], "v": [["i", "7"]] * len(step["leaves"])}
            os.write(pipe, (json.dumps(record) + "\\n").encode())
os._exit(0)
"""
# Records of every wrong shape through the pipe: each must count as a failed assert, no exception.
MALFORMED = """
import os, sys
pipe = sys._getframe(1).f_locals["write_fd"]
for line in ['{"t": [], "a": 0, "v": []}', '{"t": 0, "a": {}, "v": [["i", "5"]]}', '{"t": {}, "e": "x"}',
             '{"t": 0, "a": 0, "v": 5}', '{"t": 0, "a": 0, "v": [["zz"]]}', '{"t": 0, "a": 9, "v": []}',
             '{"t": 1, "a": 0, "v": [null, [[[[]]]]]}', '[1, 2]', 'not json', '{"done": true}']:
    os.write(pipe, (line + "\\n").encode())
os._exit(0)
"""
# Looking for the harness's nonce and channel where they used to be, and printing a report-shaped
# line (the 62-character reply of issue 29 printed one and crashed the grader).
STEAL = """
import os, sys
frame = sys._getframe(1)
while frame is not None:
    for name in ("nonce", "channel"):
        if name in frame.f_locals:
            print("found", name)
    frame = frame.f_back
try:
    for fd in os.listdir("/proc/" + str(os.getppid()) + "/fd"):
        print("parent fd", fd)
except OSError as exc:
    print("denied", exc)
print("0" * 32, '{"t": [], "a": 0, "v": []}')
os.write(1, b'{"t": 0, "a": 0, "v": [["i", "5"]]}\\n')
"""
HACKS = {
    "sys_exit_before_tests": "import sys\nsys.exit(0)\n",
    "os_exit_before_tests": "import os\nos._exit(0)\n",
    "exit_in_call": "import os\ndef add_three(x):\n    os._exit(0)\n",
    "monkeypatch_output": (
        "import builtins, sys, io\nbuiltins.print = lambda *a, **k: None\nsys.stdout = io.StringIO()\n"
        "builtins.AssertionError = Exception\ndef add_three(x):\n    return 7\n"
    ),
    "always_equal": (
        "class Eq:\n    def __eq__(self, other):\n        return True\n    def __ne__(self, other):\n"
        "        return False\ndef add_three(x):\n    return Eq()\n"
    ),
    "int_subclass": "class I(int):\n    def __eq__(self, o):\n        return True\ndef add_three(x):\n    return I(7)",
    "fake_marker": 'print("ALL TESTS PASSED")\nprint("ok 1\\nok 2")\ndef add_three(x):\n    return 7\n',
    "forged_reports": FORGE,
    "malformed_reports": MALFORMED,
    "steal_the_channel": STEAL,
}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_reward_hacks_earn_nothing(sandbox: LocalSandbox, hack: str) -> None:
    grade = asyncio.run(grade_code(sandbox, PROBLEM, HACKS[hack], timeout_s=5))
    assert not grade.verdict.all_passed and grade.verdict.passed == 0, grade
    if hack == "forged_reports":  # the forgery was read, and failed on its values
        assert "does not hold" in grade.verdict.detail


def test_the_harness_keeps_its_channel_out_of_reach(sandbox: LocalSandbox) -> None:
    from train_core.rl.code_grading import assert_harness

    nonce = "ab" * 16
    harness = assert_harness(STEAL, PROBLEM.plan, nonce)  # type: ignore[arg-type]
    result = asyncio.run(sandbox.run(Program(harness.code, harness.files, harness.stdin), 5))
    assert "found" not in result.stderr and "parent fd" not in result.stderr, result.stderr
    assert "denied" in result.stderr  # /proc/<harness>/fd: the harness is not dumpable
    assert '"v"' not in result.stdout and result.stdout.endswith(f"{nonce} " + '{"done": true}\n')
    assert '{"t": 0, "a": 0, "v": [["i", "5"]]}' in result.stderr  # the forged lines went to stderr


def test_the_honest_solution_passes(sandbox: LocalSandbox) -> None:
    grade = asyncio.run(grade_code(sandbox, PROBLEM, "def add_three(x):\n    return x + 3\n", timeout_s=5))
    assert grade.verdict.all_passed and grade.verdict.passed == 2
