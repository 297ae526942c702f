"""Arithmetic with numbers too big to do by heart, and a `calculator` tool to do it with.

"What is 48 * 91?": the policy should call `calculator(expression="48 * 91")`, read the result
from the tool message, and answer with it. Reward: 1 when the final answer's last number is the
exact result, plus `tool_bonus` times the share of the episode's call attempts (calls, and
replies that could not be parsed) the calculator accepted: shaping, so a model that cannot yet
copy numbers still learns from its calls, and one that pays for a retry after an invalid call,
so more attempts do not buy the bonus (with a flat bonus for any accepted call the tiny model
learned to retry and its valid-call rate fell; issue 42). Problems are a pure function of (seed,
batch index).

The demonstrations come from a sloppy teacher: with probability `error_rate` its call passes
the expression under a wrong argument name (a call the tool rejects), after which it guesses an
answer, one too high. A model imitating it makes the same invalid calls; RL, rewarded only for
correct answers, learns to call the tool properly: both the valid-call rate and the reward rise.
"""

from __future__ import annotations

import ast
import operator
import random
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import Field

from kitchen import Section
from kitchen.integrations.tools import PARSE_ERROR_MESSAGE, Toolbox, ToolUseEnv, tool
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message, ToolCall
from train_core.rl.math_grading import extract_last_number
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, RLDataset

_OPERATORS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
}
OPERATIONS = ("+", "-", "*")


def _evaluate(node: ast.expr) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError(f"only integers with + - * are supported, not {ast.unparse(node)!r}")


@tool(timeout_s=2.0)
def calculator(expression: str) -> str:
    """Evaluates an integer arithmetic expression exactly.

    Args:
        expression: integers combined with +, - and *, e.g. "482 * 917"
    """
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot read {expression!r} as an expression") from None
    return str(_evaluate(tree.body))


@dataclass(frozen=True)
class Problem:
    a: int
    op: str
    b: int

    @property
    def expression(self) -> str:
        return f"{self.a} {self.op} {self.b}"

    @property
    def answer(self) -> int:
        return _evaluate(ast.parse(self.expression, mode="eval").body)

    def question(self) -> Message:
        return Message(role="user", content=f"What is {self.expression}?")


def random_problem(rng: random.Random, digits: int) -> Problem:
    low, high = 10 ** (digits - 1), 10**digits - 1
    return Problem(rng.randint(low, high), rng.choice(OPERATIONS), rng.randint(low, high))


def grade(problem: Problem, tool_bonus: float = 0.0) -> Callable[[list[Message]], tuple[float, dict[str, float]]]:
    """`correct` (1 when the final message is an answer, no call, whose last number is the exact
    result) plus `tool_bonus` times the share of call attempts the tool accepted (`accepted`);
    `used_calculator` is 1 when any was."""

    def grader(messages: list[Message]) -> tuple[float, dict[str, float]]:
        last = messages[-1]
        number = extract_last_number(last["content"]) if last["role"] == "assistant" else None
        answered = last["role"] == "assistant" and not last.get("tool_calls")
        correct = float(answered and number is not None and number.replace(",", "") == str(problem.answer))
        results = [m["content"] for m in messages if m["role"] == "tool"]
        unparsed = sum(m["role"] == "user" and m["content"] == PARSE_ERROR_MESSAGE for m in messages)
        accepted = sum(not text.startswith("Error:") for text in results)
        share = accepted / (len(results) + unparsed) if results or unparsed else 0.0
        metrics = {"correct": correct, "used_calculator": float(accepted > 0), "accepted": share}
        return correct + tool_bonus * share, metrics

    return grader


@dataclass(frozen=True)
class CalculatorGroupBuilder(EnvGroupBuilder):
    problem: Problem
    renderer: Renderer
    toolbox: Toolbox
    group_size: int
    max_turns: int
    tool_bonus: float

    async def make_envs(self) -> list[ToolUseEnv]:
        grader = grade(self.problem, self.tool_bonus)
        question = [self.problem.question()]
        return [
            ToolUseEnv(self.renderer, self.toolbox, question, grader, self.max_turns) for _ in range(self.group_size)
        ]

    def logging_tags(self) -> list[str]:
        return ["calculator"]


class CalculatorDataset(RLDataset):
    def __init__(self, make_group: Callable[[Problem], EnvGroupBuilder], num_batches: int, groups_per_batch: int,
                 digits: int, seed: int) -> None:  # fmt: skip
        self.make_group = make_group
        self.num_batches = num_batches
        self.groups_per_batch = groups_per_batch
        self.digits = digits
        self.seed = seed

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"calculator/{self.seed}/{index}")
        return [self.make_group(random_problem(rng, self.digits)) for _ in range(self.groups_per_batch)]

    def __len__(self) -> int:
        return self.num_batches


@dataclass(frozen=True)
class TeacherEpisodes:
    """Solved problems with the tools declared as the renderer declares them (see the module doc
    for the teacher's slips)."""

    renderer: Renderer
    toolbox: Toolbox
    digits: int
    error_rate: float

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        return [self._episode(rng) for _ in range(count)]

    def _episode(self, rng: random.Random) -> list[Message]:
        problem = random_problem(rng, self.digits)
        slip = rng.random() < self.error_rate
        key = "expr" if slip else "expression"
        call = ToolCall(name="calculator", arguments={key: problem.expression})
        rejected = calculator.validate(call["arguments"])
        result = f"Error: {rejected}" if isinstance(rejected, str) else calculator.fn(problem.expression)
        answer = problem.answer + 1 if slip else problem.answer
        messages = [
            problem.question(),
            Message(role="assistant", content="", tool_calls=[call]),
            Message(role="tool", content=result, name="calculator"),
            Message(role="assistant", content=str(answer)),
        ]
        return self.renderer.declare_tools(messages, self.toolbox.specs)


def calculator_task(
    renderer: Renderer,
    *,
    num_batches: int,
    groups_per_batch: int,
    group_size: int,
    digits: int,
    max_turns: int,
    num_eval_problems: int,
    seed: int,
    teacher_error_rate: float,
    tool_bonus: float = 0.0,
) -> RLTask:
    toolbox = Toolbox([calculator])

    def make_group(problem: Problem) -> EnvGroupBuilder:
        return CalculatorGroupBuilder(problem, renderer, toolbox, group_size, max_turns, tool_bonus)

    eval_rng = random.Random(f"calculator-eval/{seed}")
    return RLTask(
        train=CalculatorDataset(make_group, num_batches, groups_per_batch, digits, seed),
        eval_builders=[make_group(random_problem(eval_rng, digits)) for _ in range(num_eval_problems)],
        demonstrations=TeacherEpisodes(renderer, toolbox, digits, teacher_error_rate),
    )


class CalculatorSettings(Section):
    """Config section `env` of tool_rl: big-number additions and the calculator tool."""

    digits: int = Field(2, ge=1, le=9, description="digits of each operand")
    max_turns: int = Field(3, ge=1, description="model turns per episode (tool calls plus the answer)")
    num_eval_problems: int = Field(8, ge=0, description="size of the held-out set")
    teacher_error_rate: float = Field(
        0.4, ge=0, le=1, description="share of warm-start episodes whose call is invalid (then a guess)"
    )
    tool_bonus: float = Field(
        0.5,
        ge=0,
        description="reward for an episode whose calculator calls were all accepted (a share of it for some), "
        "on top of 1 for the answer",
    )
