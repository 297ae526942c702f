"""terminal_rl (issue 42 item 9): Harbor-format terminal tasks played in the bubblewrap sandbox.

The noop model's replies are scripted from the prompt: the shipped task's reference command
(its solution/solve.sh) first, then DONE once it has seen the command's output. The commands
run in the real sandbox and the task's own tests/test.sh grades what they left."""

from __future__ import annotations

import asyncio
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

from kitchen.engine.errors import DataError
from kitchen.testing import run_on_noop
from recipes.data import shipped_data
from recipes.envs.harbor_tasks import UnsupportedTaskError, load_harbor_task, load_harbor_tasks, read_reward
from recipes.envs.terminal import (
    DONE,
    TerminalDemonstrations,
    TerminalSession,
    TerminalSettings,
    opening,
    read_command,
)
from recipes.terminal_rl import RECIPE
from sandbox import bubblewrap_unavailable_reason, make_sandbox

needs_bubblewrap = pytest.mark.skipif(
    bubblewrap_unavailable_reason() is not None, reason=f"bubblewrap: {bubblewrap_unavailable_reason()}"
)
TASKS = Path(shipped_data("terminal"))


def solution_command(name: str) -> str:
    text = (TASKS / name / "solution" / "solve.sh").read_text()
    return "\n".join(line for line in text.splitlines() if not line.startswith("#!")).strip()


SOLUTIONS = {load_harbor_task(TASKS / name).instruction: solution_command(name) for name in sorted(os.listdir(TASKS))}


def answered(prompt: str) -> bool:
    """Whether the prompt shows a command's outcome (the observation starts with its exit code)."""
    return re.search(r"^exit code -?\d+", prompt, re.M) is not None


def solving(prompt: str) -> str:
    """The reference command for the task the prompt states, then DONE after its output."""
    if answered(prompt):
        return "DONE"
    command = next(command for instruction, command in SOLUTIONS.items() if instruction in prompt)
    return f"```bash\n{command}\n```"


def idle(prompt: str) -> str:
    """Looks around, then gives up: the tests must find the task unsolved."""
    return "DONE" if answered(prompt) else "```bash\nls\n```"


def run(tmp_path: Path, replies: Any, *extra: str) -> Any:
    return run_on_noop(
        RECIPE,
        "renderer=qwen3_instruct",
        "sampling.max_tokens=64",
        "rl.group_size=2",
        "rl.groups_per_batch=3",
        "rl.num_batches=1",
        "warm_start.steps=0",
        "eval.every=0",
        *extra,
        log_path=tmp_path / "run",
        replies=replies,
    )


@needs_bubblewrap
def test_a_scripted_policy_solves_every_shipped_task_through_the_sandbox(tmp_path: Path) -> None:
    result = run(tmp_path, solving, "env.max_turns=2")
    assert result.column("env/all/reward/total") == [1.0]
    assert result.column("env/all/solved") == [1.0]
    assert result.column("env/all/turns") == [2.0]  # the command, then DONE
    assert result.column("env/all/sandbox_error") == [0.0]


@needs_bubblewrap
def test_at_the_recipes_one_turn_the_tests_grade_the_first_command(tmp_path: Path) -> None:
    result = run(tmp_path, solving)
    assert result.column("env/all/solved") == [1.0]
    assert result.column("env/all/turns") == [1.0]
    assert run(tmp_path / "idle", idle).column("env/all/solved") == [0.0]


@needs_bubblewrap
def test_a_policy_that_does_nothing_earns_nothing(tmp_path: Path) -> None:
    result = run(tmp_path, idle)
    assert result.column("env/all/reward/total") == [0.0]
    assert result.column("env/all/verifier_error") == [0.0]  # the tests ran and wrote their 0


def test_the_command_is_the_last_shell_block() -> None:
    assert read_command("first\n```bash\nls\n```\nthen\n```sh\nwc -l x\n```") == "wc -l x"
    assert read_command("no block, DONE") is None
    assert DONE.search("All DONE.") and not DONE.search("ABANDONED")


def test_reward_files_follow_harbors_convention() -> None:
    assert read_reward({"/logs/verifier/reward.txt": "0.5\n"}) == 0.5
    assert read_reward({"/logs/verifier/reward.json": '{"reward": 0.25}'}) == 0.25
    assert read_reward({"/logs/verifier/reward.json": '{"accuracy": 1}'}) == 1.0
    assert read_reward({"/logs/verifier/reward.json": '{"a": 1, "b": 0}'}) is None
    assert read_reward({"/logs/verifier/reward.txt": "passed"}) is None
    assert read_reward({}) is None


def test_the_shipped_tasks_are_read_from_their_dockerfiles() -> None:
    tasks, refused = load_harbor_tasks(TASKS, skip_unsupported=False)
    assert refused == []
    by_name = {task.name: task for task in tasks}
    scores = by_name["sort-scores"]
    assert scores.workdir == "/app"
    assert set(scores.files) == {"data/scores.csv"}
    assert scores.setup == ('mkdir -p out &&  echo "results go here" > out/README',)
    assert scores.env == {"LC_ALL": "C.UTF-8"}
    assert scores.verifier_timeout_s == 30.0
    assert "test.sh" in scores.tests


def write_task(root: Path, dockerfile: str, **files: str) -> Path:
    for name, text in {
        "task.toml": "[verifier]\ntimeout_sec = 10.0\n",
        "instruction.md": "Do it.",
        "tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n",
        "environment/Dockerfile": dockerfile,
        **files,
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("dockerfile", "line", "reason"),
    [
        ("FROM python:3.12\nWORKDIR /app\nRUN apt-get update && apt-get install -y jq\n", 3, "RUN with `apt-get`"),
        ("FROM python:3.12\nWORKDIR /app\nRUN pip install \\\n    requests\n", 3, "RUN with `pip`"),
        ("FROM python:3.12\nWORKDIR /app\nRUN echo $(curl example.com) > x\n", 3, "command substitution"),
        ("FROM python:3.12\nWORKDIR /app\nUSER nobody\n", 3, "USER"),
        ("FROM python:3.12\nWORKDIR /usr/src/app\n", 2, "outside the system dirs"),
        ("FROM python:3.12\nCOPY x.txt /app/\n", 2, "COPY before a WORKDIR"),
        ("FROM python:3.12\nWORKDIR /app\nCOPY --from=build /out /app\n", 3, "flags"),
        ("FROM python:3.12\nWORKDIR /app\nCOPY ../secret /app/\n", 3, "inside environment/"),
        ("WORKDIR /app\n", 1, "the first instruction must be FROM"),
    ],
)
def test_a_task_that_needs_a_docker_build_is_refused_naming_task_and_line(
    tmp_path: Path, dockerfile: str, line: int, reason: str
) -> None:
    root = write_task(tmp_path / "needs-build", dockerfile)
    where = rf"needs-build: environment/Dockerfile line {line}: "
    with pytest.raises(UnsupportedTaskError, match=where + ".*" + re.escape(reason)):
        load_harbor_task(root)


def test_compose_files_and_prebuilt_images_are_refused(tmp_path: Path) -> None:
    compose = write_task(tmp_path / "compose", "FROM x\nWORKDIR /app\n", **{"environment/docker-compose.yaml": "{}"})
    with pytest.raises(UnsupportedTaskError, match=r"compose: environment/docker-compose\.yaml"):
        load_harbor_task(compose)
    prebuilt = {"task.toml": '[environment]\ndocker_image = "a/b:1"\n'}
    image = write_task(tmp_path / "image", "FROM x\nWORKDIR /app\n", **prebuilt)
    with pytest.raises(UnsupportedTaskError, match="docker_image"):
        load_harbor_task(image)


def test_skipping_leaves_the_refused_tasks_out_with_their_reasons(tmp_path: Path) -> None:
    write_task(tmp_path / "a-fine", "FROM x\nWORKDIR /app\n")
    write_task(tmp_path / "b-apt", "FROM x\nWORKDIR /app\nRUN apt-get install -y jq\n")
    with pytest.raises(UnsupportedTaskError, match="b-apt"):
        load_harbor_tasks(tmp_path, skip_unsupported=False)
    tasks, refused = load_harbor_tasks(tmp_path, skip_unsupported=True)
    assert [task.name for task in tasks] == ["a-fine"]
    assert len(refused) == 1 and "b-apt: environment/Dockerfile line 3" in refused[0]


def test_a_broken_task_toml_is_a_data_error_naming_the_file(tmp_path: Path) -> None:
    root = write_task(tmp_path / "bad", "FROM x\nWORKDIR /app\n", **{"task.toml": "[verifier\n"})
    with pytest.raises(DataError, match=r"bad/task\.toml"):
        load_harbor_task(root)
    with pytest.raises(DataError, match="timeout_sec must be a positive number"):
        negative = {"task.toml": "[agent]\ntimeout_sec = -1\n"}
        load_harbor_task(write_task(tmp_path / "neg", "FROM x\nWORKDIR /app\n", **negative))


def test_the_process_sandbox_is_refused_for_terminal_tasks(tmp_path: Path) -> None:
    task = load_harbor_task(TASKS / "count-lines")
    with pytest.warns(UserWarning, match="process sandbox"):
        sandbox = make_sandbox("process", concurrency=1)
    answer = asyncio.run(TerminalSession(task, sandbox, TerminalSettings(tasks=str(TASKS))).run([], "ls", grade=False))
    assert "cannot show dirs at fixed paths" in answer["sandbox_error"]


@needs_bubblewrap
def test_the_warm_start_sends_reference_solutions_with_their_real_output(tmp_path: Path) -> None:
    """The teacher sends the task's own solution at `teacher_match_rate`, else another task's;
    either way the observation is the one the command really gets in that task's sandbox."""
    tasks, _ = load_harbor_tasks(TASKS, skip_unsupported=False)
    settings = TerminalSettings(tasks=str(TASKS), max_turns=2, teacher_match_rate=0.5)
    episodes = TerminalDemonstrations(tasks, settings)(random.Random(0), 400)
    assert {episode[0]["content"] for episode in episodes} == {opening(task)["content"] for task in tasks}
    own = {opening(task)["content"]: f"```bash\n{solution_command(task.name)}\n```" for task in tasks}
    matched = [episode for episode in episodes if episode[1]["content"] == own[episode[0]["content"]]]
    assert 0.4 < len(matched) / len(episodes) < 0.6
    assert {episode[2]["content"] for episode in matched} == {"exit code 0"}
    assert all(episode[3]["content"] == "DONE" for episode in episodes)
    count_lines = opening(next(task for task in tasks if task.name == "count-lines"))["content"]
    count_in_sort = next(e for e in episodes if "sort -t," in e[1]["content"] and e[0]["content"] == count_lines)
    assert set(count_in_sort[2]["content"].splitlines()) == {  # the pipeline's two errors, in either order
        "exit code 1",
        "bash: line 1: out/top3.txt: No such file or directory",
        "sort: cannot read: data/scores.csv: No such file or directory",
    }
    only_own = TerminalDemonstrations(tasks, TerminalSettings(tasks=str(TASKS), teacher_match_rate=1.0))
    assert all(e[1]["content"] == own[e[0]["content"]] for e in only_own(random.Random(1), 40))
    one_turn = TerminalDemonstrations(tasks, settings.model_copy(update={"max_turns": 1}))(random.Random(0), 400)
    assert [[m["content"] for m in e] for e in one_turn] == [[m["content"] for m in e[:2]] for e in episodes]
    result = run(tmp_path, idle, "warm_start.steps=2", "warm_start.batch_size=4")
    assert result.column("env/all/reward/total") == [0.0]  # the noop model's scripted replies still decide
