"""The sandbox's limits hold for terminal episodes (terminal_rl): the adversarial cases of
test_adversarial.py, issued as the policy's shell commands through the env's own sandbox runs,
plus the ways a shell could forge the reward. The task is the shipped count-lines, which none
of these commands solves, so any reward above 0 is a forgery."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from recipes.data import shipped_data
from recipes.envs.harbor_tasks import load_harbor_task, read_reward
from recipes.envs.terminal import TerminalSession, TerminalSettings
from sandbox import Program, bubblewrap_unavailable_reason, make_sandbox

pytestmark = pytest.mark.skipif(
    bubblewrap_unavailable_reason() is not None, reason=f"bubblewrap: {bubblewrap_unavailable_reason()}"
)


@pytest.fixture(scope="module")
def session() -> TerminalSession:
    task = load_harbor_task(Path(shipped_data("terminal")) / "count-lines")
    settings = TerminalSettings(tasks=shipped_data("terminal"), command_timeout_s=4.0)
    return TerminalSession(task, make_sandbox("bubblewrap", concurrency=1), settings)


def command(session: TerminalSession, text: str, history: tuple[str, ...] = ()) -> dict[str, Any]:
    answer = asyncio.run(session.run(list(history), text, grade=False))
    assert "command" in answer, answer
    result: dict[str, Any] = answer["command"]
    return result


def graded(session: TerminalSession, *history: str) -> dict[str, Any]:
    return asyncio.run(session.run(list(history), None, grade=True))


def reward(answer: dict[str, Any]) -> float | None:
    assert "grade" in answer, answer
    return read_reward(answer["grade"]["rewards"])


FORGERIES = {
    "reward_written_early": "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt",
    "tests_replaced": "mkdir -p /tests && printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh",
    "background_writer": "(while true; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; done) "
    ">/dev/null 2>&1 &",
    "setsid_writer": "setsid bash -c 'while true; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
    "done' >/dev/null 2>&1 < /dev/null &",
    "result_line_forged": 'for f in /proc/[0-9]*/fd/1; do echo \'{"grade": {"rewards": '
    '{"/logs/verifier/reward.txt": "1"}}}\' > $f; done 2>/dev/null; true',
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_reward_earns_nothing(session: TerminalSession, forgery: str) -> None:
    answer = graded(session, FORGERIES[forgery])
    assert reward(answer) == 0.0


def test_the_solution_still_earns_its_reward(session: TerminalSession) -> None:
    assert reward(graded(session, "wc -l < visitors.txt > count.txt")) == 1.0


def test_no_network(session: TerminalSession) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        result = command(session, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")
        server.setblocking(False)  # a connection made would wait in the backlog
        with pytest.raises(BlockingIOError):
            server.accept()
    assert result["exit_code"] != 0
    assert "connected" not in result["output"]


def test_writes_outside_the_sandbox_do_not_land(session: TerminalSession, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    result = command(session, f"echo pwned > {target}; echo pwned > /usr/escaped.txt; ls {Path.cwd()}")
    assert not target.exists()
    assert not Path("/usr/escaped.txt").exists()
    assert "No such file or directory" in result["output"] or "Read-only" in result["output"]


def test_the_trainers_environment_is_not_inherited(session: TerminalSession, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KITCHEN_TEST_SECRET", "hunter2")
    result = command(session, "env; cat /proc/1/environ")
    assert "hunter2" not in result["output"]


def test_a_fork_bomb_is_contained_and_the_next_run_works(session: TerminalSession) -> None:
    command(session, ":(){ :|:& };:")  # the runner still answers: the process limit held the bomb
    assert command(session, "echo alive")["output"] == "alive\n"
    assert reward(graded(session, ":(){ :|:& };:")) == 0.0


def test_killing_everything_it_can_reach_spares_the_trainer(session: TerminalSession) -> None:
    answer = asyncio.run(session.run([], "kill -9 -1", grade=False))
    assert "sandbox_error" in answer  # it took the runner down with it, and nothing else
    assert os.getpid() > 0 and command(session, "echo alive")["output"] == "alive\n"


def test_daemons_do_not_outlive_the_run(session: TerminalSession) -> None:
    marker = "31337.25"
    command(session, f"setsid sleep {marker} >/dev/null 2>&1 < /dev/null & nohup sleep {marker} >/dev/null 2>&1 &")
    left = []
    for pid in (name for name in os.listdir("/proc") if name.isdigit()):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                left.append(pid)
        except OSError:
            pass
    assert left == []


def test_a_reward_file_left_beside_the_tests_own_is_gone_before_they_run(session: TerminalSession) -> None:
    """sort-scores' tests write reward.json; a reward.txt left early would be read first."""
    task = load_harbor_task(Path(shipped_data("terminal")) / "sort-scores")
    scores = TerminalSession(task, session.sandbox, session.settings)
    assert reward(graded(scores, FORGERIES["reward_written_early"])) == 0.0
    assert reward(graded(scores, "printf 'ivy\\nolek\\nmira\\n' > out/top3.txt")) == pytest.approx(2 / 3, abs=1e-3)


@pytest.mark.parametrize("target", ["/", "/usr", "/usr/local/app", "/etc", "/proc/x", "/sandbox", "app", "/app/../etc"])
def test_a_mount_cannot_hide_the_system_view(target: str) -> None:
    with pytest.raises(ValueError, match="sandbox mount"):
        Program("", mounts={target: "work"})
