"""The code env end to end through a real local sandbox, its JSONL loader and the sloppy teacher."""

from __future__ import annotations

import asyncio
import json
import random
import warnings
from pathlib import Path

import pytest

from recipes.envs.code import CodeDemonstrations, CodeEnv, CodeProblem, grade_code, load_code_problems, parse_problem
from sandbox import Program, RunResult, Sandbox, SandboxUnavailableError, make_sandbox
from tests.rl_workflow.envs_common import renderer, reply_tokens
from train_core.errors import InvalidInputError

DATA = Path(__file__).resolve().parents[2] / "recipes" / "data" / "code"
PROBLEM = CodeProblem.from_asserts("Write add_three(x).", ["assert add_three(2) == 5", "assert add_three(0) == 3"])


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the process fallback warns where bubblewrap cannot run
        return make_sandbox("auto", concurrency=4)


def step(sandbox: Sandbox, reply: str, problem: CodeProblem = PROBLEM) -> tuple[float, dict[str, float]]:
    r = renderer()
    env = CodeEnv(problem, r, sandbox, format_coef=0.1, timeout_s=2)

    async def go() -> tuple[float, dict[str, float]]:
        await env.initial_observation()
        result = await env.step(reply_tokens(r, reply))
        return result.reward, result.metrics

    return asyncio.run(go())


def test_rewards_and_metrics(sandbox: Sandbox) -> None:
    reward, metrics = step(sandbox, "```python\ndef add_three(x):\n    return x + 3\n```")
    assert reward == 1.0 and metrics["pass"] == 1.0 and metrics["format"] == 1.0 and metrics["sandbox_seconds"] > 0
    reward, metrics = step(sandbox, "```python\ndef add_three(x):\n    return x + 4\n```")
    assert reward == 0.0 and metrics["pass"] == 0.0 and metrics["format"] == 1.0
    reward, metrics = step(sandbox, "def add_three(x):\n    return x + 3")
    assert reward == pytest.approx(-0.1) and metrics["format"] == 0.0
    reward, metrics = step(sandbox, "```python\ndef add_three(x):\n    while True:\n        pass\n```")
    assert reward == 0.0 and metrics["timeout"] == 1.0


def test_stdin_stdout_cases(sandbox: Sandbox) -> None:
    record = {
        "problem": "Sum two ints.",
        "tests": json.dumps([{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10"}]),
    }
    problem = parse_problem(record)
    assert step(sandbox, "```python\nprint(sum(map(int, input().split())))\n```", problem)[0] == 1.0
    assert step(sandbox, "```python\nprint(3)\n```", problem)[0] == 0.0


class BrokenSandbox(Sandbox):
    def __init__(self, answer: RunResult | None) -> None:
        super().__init__(1)
        self.answer = answer

    async def _run(self, program: Program, timeout_s: float) -> RunResult:
        if self.answer is None:
            raise SandboxUnavailableError("sandboxfusion server http://127.0.0.1:1 unreachable")
        return self.answer


@pytest.mark.parametrize("answer", [None, RunResult("sandbox_error", None, "", "bwrap: boom", 0.0, detail="boom")])
def test_sandbox_errors_cost_the_reward_not_the_run(answer: RunResult | None) -> None:
    reward, metrics = step(BrokenSandbox(answer), "```python\ndef add_three(x):\n    return x + 3\n```")
    assert reward == 0.0 and metrics["sandbox_error"] == 1.0


def test_shipped_problems_load_and_the_teacher_is_sloppy(sandbox: Sandbox) -> None:
    train, test = load_code_problems(DATA / "train.jsonl"), load_code_problems(DATA / "test.jsonl")
    assert len(train) == 15 and len(test) == 5
    problem = train[0]
    assert problem.solution and problem.wrong_solution

    async def passes(code: str) -> bool:
        return (await grade_code(sandbox, problem, code, 5)).verdict.all_passed

    assert asyncio.run(passes(problem.solution)) and not asyncio.run(passes(problem.wrong_solution))
    careful = CodeDemonstrations(train, error_rate=0.0)(random.Random(0), 5)
    sloppy = CodeDemonstrations(train, error_rate=1.0)(random.Random(0), 5)
    assert all(c[1]["content"] != s[1]["content"] for c, s in zip(careful, sloppy, strict=True))
    assert careful[0][1]["content"].startswith("```python\n")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "invalid JSON"),
        ('{"tests": ["assert f() == 1"]}', "missing string key 'problem'"),
        ('{"problem": "p", "tests": []}', "'tests' must be"),
        ('{"problem": "p", "tests": ["for i in x:\\n    assert i"]}', "top-level"),
        ('{"problem": "p", "tests": {"inputs": ["1"], "outputs": []}}', "different numbers"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "problems.jsonl"
    path.write_text('{"problem": "ok", "tests": ["assert f() == 1"]}\n' + line + "\n")
    with pytest.raises(InvalidInputError, match=f"{path} line 2: .*{message}"):
        load_code_problems(path)
