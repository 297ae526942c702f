"""The program a terminal episode runs in the sandbox (this file's text is its main.py).

A sandbox run starts from nothing, so each run rebuilds the episode: it writes the task's files,
replays the Dockerfile's RUN lines and the policy's earlier commands (their output dropped),
then runs the new command, or, when grading, the task's tests. Commands that depend on time or
chance may act differently on replay.

Its stdout is one JSON object and nothing else: every command writes to a file, and the
program makes itself undumpable, so the commands (same uid) can neither ptrace it nor open its
descriptors. Before the tests run, every other process in the sandbox's PID namespace is
killed, and /tests and /logs/verifier are emptied, so nothing the policy left behind writes
the reward.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

PR_SET_DUMPABLE = 4
OUTPUT = "/sandbox/.command-output"


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 0:
        pids.add(pid)
        with open(f"/proc/{pid}/stat", "rb") as stat:
            pid = int(stat.read().rsplit(b")", 1)[1].split()[1])
    return pids


def _alive(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def kill_the_rest() -> None:
    """SIGKILL every live process in the namespace but this one and its ancestors, until none is left."""
    keep = _ancestors()
    for _ in range(100):
        pids = (int(name) for name in os.listdir("/proc") if name.isdigit())
        others = [pid for pid in pids if pid not in keep and _alive(str(pid))]
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, os.WNOHANG)
            except (ProcessLookupError, ChildProcessError, PermissionError):
                pass
        time.sleep(0.01)


def run(command: str, cwd: str, env: dict[str, str], timeout_s: float, cap: int) -> dict[str, Any]:
    """Run `command` under bash in its own session: exit code, output (first `cap` chars), time."""
    start = time.monotonic()
    with open(OUTPUT, "wb") as out:
        child = subprocess.Popen(
            ["bash", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            start_new_session=True,
        )  # fmt: skip
        try:
            code: int | None = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            code = None
    with open(OUTPUT, "rb") as out:
        output = out.read(cap + 1).decode("utf-8", errors="replace")
    os.remove(OUTPUT)
    return {"exit_code": code, "output": output, "seconds": time.monotonic() - start}


def write_tree(root: str, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = Path(root) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes.fromhex(text))
        if name.endswith(".sh"):
            path.chmod(0o755)


def grade(spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    kill_the_rest()
    for folder in ("/tests", "/logs/verifier"):
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder, exist_ok=True)
    write_tree("/tests", spec["tests"])
    verify_env = {**env, **spec["verifier_env"]}
    result = run("bash /tests/test.sh", spec["workdir"], verify_env, spec["verifier_timeout_s"], spec["cap"])
    kill_the_rest()
    rewards = {}
    for name in spec["reward_files"]:
        if os.path.isfile(name):
            with open(name, encoding="utf-8", errors="replace") as file:
                rewards[name] = file.read(4096)
    return {**result, "rewards": rewards}


def main() -> None:
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    with open("spec.json", encoding="utf-8") as file:
        spec = json.load(file)
    os.remove("spec.json")
    workdir = spec["workdir"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
    env.update(spec["env"])
    write_tree(workdir, spec["files"])
    answer: dict[str, Any] = {}
    for command in spec["setup"]:
        result = run(command, workdir, env, spec["command_timeout_s"], spec["cap"])
        if result["exit_code"] != 0:
            answer["setup_failed"] = {"command": command, **result}
            print(json.dumps(answer))
            return
    for command in spec["history"]:
        run(command, workdir, env, spec["command_timeout_s"], 0)
    if spec["command"] is not None:
        answer["command"] = run(spec["command"], workdir, env, spec["command_timeout_s"], spec["cap"])
    if spec["grade"]:
        answer["grade"] = grade(spec, env)
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
