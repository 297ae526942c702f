"""The process sandbox's guards: the program dies with the trainer and cannot gain privileges;
RL refuses the process sandbox unless the user accepts the risk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
import warnings

import pytest

from sandbox import SandboxUnavailableError, make_sandbox
from sandbox.process import ProcessSandbox
from tests.code_sandbox.test_adversarial import LIMITS, processes_matching, run, settle


@pytest.fixture(scope="module")
def sandbox() -> ProcessSandbox:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ProcessSandbox(concurrency=1, limits=LIMITS)


def test_the_program_runs_with_no_new_privileges(sandbox: ProcessSandbox) -> None:
    result = run(sandbox, "print([l for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0])")
    assert result.status == "ok" and result.stdout.split() == ["NoNewPrivs:", "1"], result


@pytest.mark.slow  # starts a trainer interpreter that imports kitchen
def test_the_program_dies_with_the_trainer() -> None:
    marker = f"orphan-{uuid.uuid4().hex}"
    trainer = """
import asyncio, warnings
warnings.simplefilter("ignore")
from sandbox import Program
from sandbox.process import ProcessSandbox
sandbox = ProcessSandbox(concurrency=1)
print("started", flush=True)
asyncio.run(sandbox.run(Program(CODE), 60))
"""
    # The program also leaves a daemon in a session of its own (with the marker in its argv).
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{marker}-daemon'],"
        " start_new_session=True)\n"
        f"time.sleep(60)\n# {marker}\n"
    )
    trainer = f"CODE = {code!r}\n" + trainer
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, "-c", trainer], stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None and process.stdout.readline().strip() == "started"

    def program() -> list[int]:  # its argv is `python main.py`: found by its workdir's main.py
        return [pid for pid in processes_matching("main.py") if _in_orphan_dir(pid, marker)]

    deadline = time.monotonic() + 30
    while not program() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert program(), "the sandboxed program never started"
    deadline = time.monotonic() + 30
    while not processes_matching(f"{marker}-daemon") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_matching(f"{marker}-daemon"), "the daemon never started"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert settle(program) == []
    if os.geteuid() == 0:  # the pid namespace: whatever the program started dies with it
        assert settle(lambda: processes_matching(f"{marker}-daemon")) == []


def _in_orphan_dir(pid: int, marker: str) -> bool:
    try:
        return marker in open(f"/proc/{pid}/cwd/main.py").read()
    except OSError:
        return False


@pytest.mark.parametrize("kind", ["process"])
def test_rl_refuses_the_process_sandbox_unless_allowed(kind: str) -> None:
    with pytest.raises(SandboxUnavailableError, match=r"sandbox\.allow_unsafe: true"):
        make_sandbox(kind, allow_process=False)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert isinstance(make_sandbox(kind, allow_process=True), ProcessSandbox)  # type: ignore[arg-type]


@pytest.mark.skipif(os.geteuid() != 0, reason="the pid namespace needs a root trainer")
def test_other_processes_are_out_of_sight(sandbox: ProcessSandbox) -> None:
    code = "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
    result = run(sandbox, code)
    assert result.status == "ok" and result.stdout == "[1]\n", result  # the program alone
