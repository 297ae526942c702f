"""Code problems graded by running the reply's code in a sandbox against the problem's tests.

Reward: 1 when every test passes, else 0; a reply without a fenced Python block is a format
failure and earns `-format_coef`. A sandbox that breaks or is unreachable costs the episode its
reward (0) and shows in the `sandbox_error` metric; it never raises into the run.

Problem files are JSON lines, DeepCoder-style: a statement under `problem` (or `prompt` /
`question`) and `tests`, either a list of assert strings or stdin/stdout cases (a list of
`{"input", "output"}` objects or APPS' `{"inputs": [...], "outputs": [...]}`, either possibly
JSON-encoded in a string). Optional `solution` / `wrong_solution` feed the sloppy teacher.
"""

from __future__ import annotations

import json
import random
import secrets
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, model_validator

from kitchen import RESUME_SAFE, Count, DataError, Section, build_all
from kitchen.families.rl import RLSettings
from sandbox import Program, Sandbox, SandboxKind, SandboxUnavailableError, make_sandbox
from sandbox.factory import UNSAFE_SANDBOX_SETTING
from sandbox.local import LocalSandbox
from sandbox.process import PROCESS_SANDBOX_WARNING, ProcessSandbox
from train_core.errors import InvalidInputError
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.code_grading import (
    AssertPlan,
    StdioCase,
    TestVerdict,
    assert_harness,
    extract_code,
    grade_assert_reports,
    outputs_match,
    passes_returning_none,
    plan_assert_tests,
    read_reports,
)
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, Metrics, RLDataset, StepResult
from train_core.types import ModelInput, StopCondition

INSTRUCTION = "\n\nWrite your solution in Python inside a single ```python code block."


@dataclass(frozen=True)
class CodeProblem:
    """A statement and its tests: assert strings (`plan`) or stdin/stdout cases, exactly one kind."""

    prompt: str
    plan: AssertPlan | None = None
    cases: tuple[StdioCase, ...] = ()
    solution: str | None = None
    wrong_solution: str | None = None

    def __post_init__(self) -> None:
        if (self.plan is None) == (not self.cases):
            raise InvalidInputError("a code problem needs either assert tests or stdin/stdout cases (one kind)")

    @classmethod
    def from_asserts(
        cls, prompt: str, tests: Sequence[str], solution: str | None = None, wrong_solution: str | None = None
    ) -> CodeProblem:
        return cls(prompt, plan=plan_assert_tests(tests), solution=solution, wrong_solution=wrong_solution)


@dataclass(frozen=True)
class Grade:
    """One solution's grading: the verdict and how the sandbox runs went."""

    verdict: TestVerdict
    timeout: bool = False
    sandbox_error: bool = False
    sandbox_seconds: float = 0.0
    memory_killed: bool = False


async def grade_code(sandbox: Sandbox, problem: CodeProblem, code: str, timeout_s: float) -> Grade:
    """Run `code` against the problem's tests; stdin/stdout cases stop at the first failure."""
    try:
        if problem.plan is not None:
            nonce = secrets.token_hex(16)
            harness = assert_harness(code, problem.plan, nonce)
            result = await sandbox.run(Program(harness.code, harness.files, harness.stdin), timeout_s)
            verdict = grade_assert_reports(problem.plan, read_reports(result.stdout, nonce))
            return Grade(
                verdict,
                result.status == "timeout",
                result.status == "sandbox_error",
                result.elapsed_s,
                result.memory_killed,
            )
        seconds, total = 0.0, len(problem.cases)
        for passed, case in enumerate(problem.cases):
            result = await sandbox.run(Program(code, stdin=case.input), timeout_s)
            seconds += result.elapsed_s
            if result.status != "ok" or not outputs_match(result.stdout, case.output):
                detail = f"case {passed}: {result.status} {result.detail}".strip()
                failed = TestVerdict(passed, total, detail)
                timeout, broke = result.status == "timeout", result.status == "sandbox_error"
                return Grade(failed, timeout, broke, seconds, result.memory_killed)
        return Grade(TestVerdict(total, total), sandbox_seconds=seconds)
    except SandboxUnavailableError as exc:
        return Grade(TestVerdict(0, 1, str(exc)), sandbox_error=True)


class CodeEnv(Env):
    """One code problem, one reply."""

    def __init__(
        self,
        problem: CodeProblem,
        renderer: Renderer,
        sandbox: Sandbox,
        format_coef: float = 0.1,
        timeout_s: float = 10.0,
    ) -> None:
        self.problem = problem
        self.renderer = renderer
        self.sandbox = sandbox
        self.format_coef = format_coef
        self.timeout_s = timeout_s

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        messages: list[Message] = [{"role": "user", "content": self.problem.prompt + INSTRUCTION}]
        return self.renderer.build_generation_prompt(messages), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        message, parsed = self.renderer.parse_response(action)
        code = extract_code(message["content"]) if parsed else None
        metrics: Metrics = {"format": float(code is not None), "pass": 0.0, "timeout": 0.0, "sandbox_error": 0.0}
        metrics["memory_kill"] = 0.0
        metrics["sandbox_seconds"] = 0.0
        if code is None:
            reward = -self.format_coef
        else:
            grade = await grade_code(self.sandbox, self.problem, code, self.timeout_s)
            reward = float(grade.verdict.all_passed)
            metrics |= {
                "pass": reward,
                "timeout": float(grade.timeout),
                "sandbox_error": float(grade.sandbox_error),
                "sandbox_seconds": grade.sandbox_seconds,
                "memory_kill": float(grade.memory_killed),
            }
        return StepResult(
            reward=reward,
            episode_done=True,
            next_observation=ModelInput.empty(),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics=metrics,
        )


@dataclass(frozen=True)
class CodeGroupBuilder(EnvGroupBuilder):
    """`group_size` envs for one problem; the sandbox is shared and owned by whoever made it."""

    problem: CodeProblem
    renderer: Renderer
    sandbox: Sandbox
    group_size: int
    format_coef: float = 0.1
    timeout_s: float = 10.0

    async def make_envs(self) -> list[CodeEnv]:
        make = partial(CodeEnv, self.problem, self.renderer, self.sandbox, self.format_coef, self.timeout_s)
        return [make() for _ in range(self.group_size)]

    def logging_tags(self) -> list[str]:
        return ["code"]


class CodeDataset(RLDataset):
    """Batches of `groups_per_batch` problems, a seeded shuffle per epoch, wrapping at the end."""

    def __init__(
        self, problems: Sequence[CodeProblem], groups_per_batch: int, seed: int, make_group: partial[CodeGroupBuilder]
    ) -> None:
        if not problems:
            raise InvalidInputError("code dataset: no problems")
        self.problems = problems
        self.groups_per_batch = groups_per_batch
        self.seed = seed
        self.make_group = make_group

    def _problem(self, position: int) -> CodeProblem:
        epoch, offset = divmod(position, len(self.problems))
        order = list(range(len(self.problems)))
        random.Random(f"code/{self.seed}/{epoch}").shuffle(order)
        return self.problems[order[offset]]

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        start = index * self.groups_per_batch
        return [self.make_group(self._problem(start + k)) for k in range(self.groups_per_batch)]

    def __len__(self) -> int:
        return max(1, len(self.problems) // self.groups_per_batch)


def _cases(tests: Any) -> tuple[StdioCase, ...] | None:
    """stdin/stdout cases in either layout, or None when `tests` is not such a layout."""
    if isinstance(tests, dict) and isinstance(tests.get("inputs"), list) and isinstance(tests.get("outputs"), list):
        if len(tests["inputs"]) != len(tests["outputs"]):
            raise InvalidInputError("'tests' has different numbers of inputs and outputs")
        tests = [{"input": i, "output": o} for i, o in zip(tests["inputs"], tests["outputs"], strict=True)]
    if isinstance(tests, list) and tests and all(isinstance(t, dict) for t in tests):
        for case in tests:
            if not (isinstance(case.get("input"), str) and isinstance(case.get("output"), str)):
                raise InvalidInputError("each stdin/stdout case needs string 'input' and 'output'")
        return tuple(StdioCase(case["input"], case["output"]) for case in tests)
    return None


def parse_problem(record: Any) -> CodeProblem:
    """One JSON record as a problem; a bad record raises InvalidInputError saying what is wrong."""
    if not isinstance(record, dict):
        raise InvalidInputError(f"expected a JSON object, got {type(record).__name__}")
    prompt = next((record[k] for k in ("problem", "prompt", "question") if isinstance(record.get(k), str)), None)
    if prompt is None:
        raise InvalidInputError("missing string key 'problem' (or 'prompt' / 'question')")
    tests = record.get("tests")
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"'tests' is a string but not JSON: {exc.msg}") from None
    solution, wrong = (
        record.get(k) if isinstance(record.get(k), str) else None for k in ("solution", "wrong_solution")
    )
    cases = _cases(tests)
    if cases is not None:
        return CodeProblem(prompt, cases=cases, solution=solution, wrong_solution=wrong)
    if isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests):
        return CodeProblem.from_asserts(prompt, tests, solution, wrong)
    raise InvalidInputError("'tests' must be a non-empty list of assert strings or of stdin/stdout cases")


def code_problem(where: str, record: Any) -> CodeProblem:
    """`parse_problem`, a bad record being a DataError naming `where`."""
    try:
        return parse_problem(record)
    except InvalidInputError as exc:
        raise DataError(f"{where}: {exc}") from None


def load_code_problems(path: str | Path) -> Sequence[CodeProblem]:
    """Every problem of a file (JSONL, parquet, a saved dataset), each checked here and read back
    from its cache when used, so memory does not grow with the file."""
    return build_all(str(path), code_problem)


def passes_trivially(problem: CodeProblem) -> bool:
    """Whether a program that prints nothing and whose functions return None passes every test."""
    if problem.plan is not None:
        return passes_returning_none(problem.plan)
    return all(outputs_match("", case.output) for case in problem.cases)


def weak_tests_warning(path: str | Path, problems: Sequence[CodeProblem]) -> str | None:
    """A warning naming the problems whose tests pass on a trivial program, or None."""
    weak = [number for number, problem in enumerate(problems, start=1) if passes_trivially(problem)]
    if not weak:
        return None
    shown = ", ".join(map(str, weak[:20])) + (", ..." if len(weak) > 20 else "")
    return (
        f"{path}: {len(weak)} of {len(problems)} problems have tests that a program printing nothing and "
        f"returning None passes (they reward wrong programs); problems {shown}"
    )


def fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


@dataclass(frozen=True)
class CodeDemonstrations:
    """A sloppy teacher: each reply is the problem's solution, except that with probability
    `error_rate` it is the subtly wrong one (off by one, wrong edge case). Imitating it teaches the
    format and most of the skill; RL, paid only for passing tests, can then beat the teacher."""

    problems: Sequence[CodeProblem]
    error_rate: float = 0.0

    def __post_init__(self) -> None:
        if not any(p.solution for p in self.problems):
            raise InvalidInputError("code demonstrations need problems with a 'solution'")
        if not 0.0 <= self.error_rate <= 1.0:
            raise InvalidInputError(f"teacher error rate must be in [0, 1], got {self.error_rate}")

    @cached_property
    def taught(self) -> Sequence[int]:
        """The positions of the problems with a solution (found once; the problems may be lazy)."""
        return array("q", (index for index, problem in enumerate(self.problems) if problem.solution))

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        conversations = []
        for _ in range(count):
            problem = self.problems[rng.choice(self.taught)]
            slip = rng.random() < self.error_rate and problem.wrong_solution
            code = problem.wrong_solution if slip else problem.solution
            assert code is not None
            conversations.append(
                [
                    Message(role="user", content=problem.prompt + INSTRUCTION),
                    Message(role="assistant", content=fenced(code)),
                ]
            )
        return conversations


class CodeSettings(Section):
    """Config section `env` of code_rl: the problem files, the format penalty and the warm start."""

    dataset: str = Field(..., description="code problems JSONL (DeepCoder-style)")
    eval_dataset: str | None = Field(
        None, description="held-out problems; none = no eval", json_schema_extra=RESUME_SAFE
    )
    format_coef: float = Field(0.1, ge=0, description="reward penalty for a reply without a ```python block")
    teacher_error_rate: float = Field(0.6, ge=0, le=1, description="warm start: share of demonstrations that are wrong")


class SandboxSettings(Section):
    """Config section `sandbox`: where the model's programs run. A plain value is the kind."""

    FLAT: ClassVar[Mapping[str, str]] = {"kind": "sandbox", "allow_unsafe": "allow_unsafe_sandbox"}
    FLAT_PREFIX: ClassVar[str] = "sandbox_"
    SHORTHAND: ClassVar[str | None] = "kind"

    kind: SandboxKind = Field(
        "auto", description="auto (bubblewrap, else process) | bubblewrap | process | sandboxfusion"
    )
    url: str | None = Field(None, description="the SandboxFusion server (kind sandboxfusion only)")
    concurrency: Count = Field(8, description="programs run at once")
    timeout_s: float = Field(10.0, gt=0, description="wall-clock limit of one program")
    allow_unsafe: bool = Field(
        False,
        description="let RL run on the process sandbox (no network or filesystem isolation); otherwise refused",
    )

    @model_validator(mode="after")
    def _url_with_sandboxfusion(self) -> SandboxSettings:
        if (self.url is not None) != (self.kind == "sandboxfusion"):
            raise ValueError("sandbox.url is set exactly when sandbox.kind is sandboxfusion")
        return self

    @model_validator(mode="after")
    def _process_sandbox_only_when_allowed(self) -> SandboxSettings:
        """Refused here, so `kitchen validate` says so before a warm start is spent."""
        if self.kind == "process" and not self.allow_unsafe:
            raise ValueError(
                f"sandbox.kind=process is not safe for RL (no network or filesystem isolation): use bubblewrap or "
                f"sandboxfusion, or set {UNSAFE_SANDBOX_SETTING}: true to accept the risk"
            )
        return self


def load_problem_sets(env: CodeSettings) -> tuple[Sequence[CodeProblem], Sequence[CodeProblem]]:
    """The train and held-out problems; a bad record is an error naming its file and line."""
    return load_code_problems(env.dataset), load_code_problems(env.eval_dataset) if env.eval_dataset else []


def code_task(env: CodeSettings, settings: SandboxSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    """The problems' envs, graded in the sandbox `settings` describe, with the warnings the run
    should show (weak tests, an unsafe sandbox, soft limits)."""
    sandbox = make_sandbox(settings.kind, settings.url, settings.concurrency, allow_process=settings.allow_unsafe)
    group = partial(
        CodeGroupBuilder,
        renderer=renderer,
        sandbox=sandbox,
        group_size=config.rl.group_size,
        format_coef=env.format_coef,
        timeout_s=settings.timeout_s,
    )
    problems, held_out = load_problem_sets(env)
    warnings = [weak_tests_warning(env.dataset, problems)]
    if isinstance(sandbox, ProcessSandbox):
        warnings.append(f"{UNSAFE_SANDBOX_SETTING}: programs run in the process sandbox. {PROCESS_SANDBOX_WARNING}")
    notes: list[str] = []
    if isinstance(sandbox, LocalSandbox):  # a soft (watchdog) bound is a warning, the kernel's a note
        limits = f"sandbox total limits per program: {sandbox.total_limits()}"
        (notes if sandbox.cgroups is not None else warnings).append(limits)
    return RLTask(
        train=CodeDataset(problems, config.rl.groups_per_batch, config.seed, group),
        eval_builders=[group(problem) for problem in held_out],
        demonstrations=CodeDemonstrations(problems, env.teacher_error_rate),
        warnings=[warning for warning in warnings if warning],
        notes=notes,
    )
