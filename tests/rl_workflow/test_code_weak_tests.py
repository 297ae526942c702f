"""Problems whose tests a do-nothing program passes are flagged before training, and RL refuses
the process sandbox unless the config accepts the risk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from recipes.code_rl import Config, build_task
from recipes.envs.code import CodeProblem, load_code_problems, parse_problem, passes_trivially, weak_tests_warning
from tests.rl_workflow.envs_common import renderer


@pytest.mark.parametrize(
    ("tests", "weak"),
    [
        (["assert f(2) is None"], True),
        (["assert not f(3)", "assert f(1) == None"], True),
        (["assert f(2) is None", "assert f(3) == 4"], False),
        (["assert f(2) == 5"], False),
        (["assert len(f(2)) == 0"], False),  # only bare calls are known to give None
        (["x = 3\nassert f(x) != 1"], True),
    ],
)
def test_assert_tests_passed_by_returning_none(tests: list[str], weak: bool) -> None:
    assert passes_trivially(CodeProblem.from_asserts("p", tests)) is weak


def test_stdio_cases_passed_by_printing_nothing() -> None:
    empty = parse_problem({"problem": "p", "tests": [{"input": "1", "output": ""}, {"input": "2", "output": " \n"}]})
    real = parse_problem({"problem": "p", "tests": [{"input": "1", "output": ""}, {"input": "2", "output": "3"}]})
    assert passes_trivially(empty) and not passes_trivially(real)


def _problems_file(tmp_path: Path) -> Path:
    path = tmp_path / "p.jsonl"
    records = [
        {"problem": "add", "tests": ["assert add(1) == 2"], "solution": "def add(x):\n    return x + 1\n"},
        {"problem": "weak", "tests": ["assert g(1) is None"], "solution": "def g(x):\n    return None\n"},
    ]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def test_the_warning_names_the_weak_problems(tmp_path: Path) -> None:
    path = _problems_file(tmp_path)
    warning = weak_tests_warning(path, load_code_problems(path))
    assert warning is not None and f"{path}: 1 of 2 problems" in warning and warning.endswith("problems 2")
    assert weak_tests_warning(path, load_code_problems(path)[:1]) is None


def test_the_rl_task_carries_the_warning_and_refuses_the_process_sandbox(tmp_path: Path) -> None:
    path = _problems_file(tmp_path)
    base = ["backend=noop", f"env.dataset={path}", "env.eval_dataset=null"]
    with pytest.raises(ConfigError, match=r"sandbox.kind=process is not safe for RL.*sandbox.allow_unsafe: true"):
        load_config(Config, None, [*base, "sandbox.kind=process"])  # refused before any work: `kitchen validate` too
    with pytest.warns(UserWarning, match="NOT cut off"):
        allowed = load_config(Config, None, [*base, "sandbox.kind=process", "sandbox.allow_unsafe=true"])
        task = build_task(allowed, renderer())
    assert any("1 of 2 problems" in warning for warning in task.warnings)
    unsafe = "sandbox.allow_unsafe: programs run in the process sandbox"
    assert any(warning.startswith(unsafe) for warning in task.warnings)
    # How a program's memory and processes are bounded in total: a warning for the watchdog (it is
    # soft), a note where the kernel holds the limit (a cgroup v2 group per run).
    limits = [line for line in [*task.warnings, *task.notes] if line.startswith("sandbox total limits per program:")]
    assert len(limits) == 1
    assert "watchdog" in limits[0] if limits[0] in task.warnings else "memory.max" in limits[0]
