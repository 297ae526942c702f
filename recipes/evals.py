"""The shipped RL sets as evaluation tasks, registered with kitchen through the
`kitchen.eval_tasks` entry points in `pyproject.toml` (kitchen imports no recipe):

- `arithmetic`: the held-out addition problems of `math_rl` (same prompts, same grading);
- `code`: code problems run against their tests in a sandbox (default the shipped held-out set).

Each grades a reply exactly as its RL environment rewards it.
"""

from __future__ import annotations

from pydantic import Field

from kitchen.families.evaluation import (
    EvalModel,
    EvalSettings,
    EvalTask,
    Grade,
    Grader,
    Item,
    TaskResult,
    evaluate_generation,
    math_grader,
)
from recipes.data import shipped_data
from recipes.envs.arithmetic import eval_problems, question
from recipes.envs.code import INSTRUCTION as CODE_INSTRUCTION
from recipes.envs.code import grade_code, load_code_problems
from sandbox import SandboxKind, make_sandbox
from train_core.renderers.messages import Message
from train_core.rl.code_grading import extract_code

grade_math = Grader("math", math_grader)
"""Right when the final answer (last `\\boxed{}`, else last number) equals the record's `answer`."""


def _user(text: str) -> list[Message]:
    return [Message(role="user", content=text)]


class ArithmeticSettings(EvalSettings):
    max_operand: int = Field(4, ge=0, description="operands are drawn from [0, max_operand] (math_rl's default)")
    num_problems: int = Field(32, ge=1, description="problems: all of them when there are fewer, else a sample")
    problem_seed: int = Field(0, description="which problems are sampled when not all are used (math_rl's seed)")


async def _arithmetic(model: EvalModel, settings: ArithmeticSettings) -> TaskResult:
    problems = eval_problems(settings.max_operand, settings.num_problems, settings.problem_seed)
    items = [Item(_user(question(p)), {"answer": str(sum(p))}, f"problem {question(p)!r}") for p in problems]
    return await evaluate_generation(model, items, grade_math, settings)


class CodeSettings(EvalSettings):
    dataset: str = Field(
        default_factory=lambda: shipped_data("code/test.jsonl"),
        description="code problems JSONL: 'problem' and 'tests' (asserts or stdin/stdout cases)",
    )
    sandbox: SandboxKind = Field(
        "auto", description="auto (bubblewrap, else process) | bubblewrap | process | sandboxfusion"
    )
    sandbox_url: str | None = Field(None, description="the SandboxFusion server (sandbox=sandboxfusion only)")
    sandbox_concurrency: int = Field(8, ge=1, description="programs run at once")
    sandbox_timeout_s: float = Field(10.0, gt=0, description="wall-clock limit of one program")


async def _code(model: EvalModel, settings: CodeSettings) -> TaskResult:
    sandbox = make_sandbox(settings.sandbox, settings.sandbox_url, settings.sandbox_concurrency)

    async def grade(item: Item, response: str) -> Grade:
        code = extract_code(response)
        if code is None:
            return Grade(False, 0.0, "no fenced python block")
        verdict = (await grade_code(sandbox, item.record["problem"], code, settings.sandbox_timeout_s)).verdict
        reason = f"{verdict.passed}/{verdict.total} tests passed" + (f": {verdict.detail}" if verdict.detail else "")
        return Grade(verdict.all_passed, float(verdict.all_passed), reason)

    items = [
        Item(_user(problem.prompt + CODE_INSTRUCTION), {"problem": problem}, f"{settings.dataset} problem {i + 1}")
        for i, problem in enumerate(load_code_problems(settings.dataset))
    ]
    try:
        return await evaluate_generation(model, items, grade, settings)
    finally:
        await sandbox.aclose()


ARITHMETIC = EvalTask("arithmetic", "math_rl's held-out addition problems", _arithmetic, ArithmeticSettings)
CODE = EvalTask("code", "code problems graded by their tests in a sandbox", _code, CodeSettings)
