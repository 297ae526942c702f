"""Code benchmarks: the model's program run against the benchmark's tests in kitchen's sandbox.

- `humaneval_plus` (evalplus/humanevalplus, 164) and `mbpp_plus` (evalplus/mbppplus, 378):
  EvalPlus's chat prompt (its instruction, the task in a fenced block, and the assistant's reply
  opened with its response prefix and a ```python fence); the program is the reply's last
  Python block followed by the dataset's `test` code (base and plus inputs with their expected
  outputs; HumanEval+ then calls `check(entry_point)`);
- `livecodebench` (livecodebench/code_generation_lite, by release and contest-date window):
  LiveCodeBench's generic chat prompt (its system message, the question, the starter code or the
  stdin/stdout instruction); stdin problems are run once per test case and their output
  compared line by line, LeetCode-style problems call `Solution().<func_name>` on every test.

A problem passes when every test does; pass@k over `samples` per problem.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from kitchen import DataError
from kitchen.families.evaluation import (
    EvalModel,
    EvalSettings,
    EvalTask,
    Grade,
    HubDataset,
    Item,
    TaskResult,
    evaluate_generation,
    hub_file,
    load_rows,
    require,
)
from sandbox import Program, Sandbox, SandboxKind, make_sandbox
from sandbox.local import ResourceLimits
from train_core.renderers.messages import Message
from train_core.rl.code_grading import extract_code, outputs_match

EVALPLUS_INSTRUCTION = (
    "Please provide a self-contained Python script that solves the following problem in a markdown code block:"
)
"""EvalPlus `codegen.py`, instruction_prefix."""
EVALPLUS_RESPONSE = (
    "Below is a Python script with a self-contained function that solves the problem and passes corresponding tests:"
)
"""EvalPlus `codegen.py`, response_prefix."""

LCB_SYSTEM = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will generate "
    "a correct Python program that matches the specification and passes all tests."
)
"""LiveCodeBench `lcb_runner/prompts/code_generation.py`, SYSTEM_MESSAGE_GENERIC."""
LCB_WITH_STARTER = (
    "You will use the following starter code to write the solution to the problem and enclose your code within "
    "delimiters."
)
LCB_WITHOUT_STARTER = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on the "
    "sample inputs). Enclose your code within delimiters as follows. Ensure that when the python program runs, it "
    "reads the inputs, runs the algorithm and writes output to STDOUT."
)
LCB_RELEASE_FILES = {f"v{n}": tuple(["test.jsonl", *(f"test{i}.jsonl" for i in range(2, n + 1))]) for n in range(1, 7)}
"""code_generation_lite's releases: release_vN is test.jsonl and test2..testN.jsonl."""


class CodeBenchmarkSettings(EvalSettings):
    dataset: str | None = Field(None, description="a local copy of the benchmark's data (default: the hub dataset)")
    max_tokens: int = Field(32768, ge=1, description="most tokens sampled per reply")
    temperature: float = Field(0.0, ge=0, description="sampling temperature (EvalPlus greedy: 0)")
    sandbox: SandboxKind = Field(
        "auto", description="auto (bubblewrap, else process) | bubblewrap | process | sandboxfusion"
    )
    sandbox_url: str | None = Field(None, description="the SandboxFusion server (sandbox=sandboxfusion only)")
    sandbox_concurrency: int = Field(8, ge=1, description="programs run at once")
    sandbox_timeout_s: float = Field(20.0, gt=0, description="wall-clock limit of one program run")
    sandbox_memory_mb: int = Field(2048, ge=64, description="memory of one program run, all its processes together")


def open_sandbox(settings: CodeBenchmarkSettings) -> Sandbox:
    limits = ResourceLimits(
        cpu_s=max(1, int(settings.sandbox_timeout_s)), memory_bytes=settings.sandbox_memory_mb << 20
    )
    if settings.sandbox == "sandboxfusion":
        return make_sandbox("sandboxfusion", settings.sandbox_url, settings.sandbox_concurrency)
    return make_sandbox(settings.sandbox, None, settings.sandbox_concurrency, limits)


def evalplus_prompt(task_prompt: str) -> tuple[list[Message], str]:
    """EvalPlus's chat prompt of one task: the user message and the reply's opening."""
    user = f"{EVALPLUS_INSTRUCTION}\n```\n{task_prompt.strip()}\n```\n"
    return [Message(role="user", content=user)], f"{EVALPLUS_RESPONSE}\n```python\n"


def mbpp_task_prompt(row: dict[str, Any]) -> str:
    """EvalPlus's MBPP+ task prompt: the description and the first test, in a docstring."""
    return f'"""\n{row["prompt"]}\n{row["test_list"][0]}\n"""\n'


def _verdict(passed: bool, reason: str) -> Grade:
    return Grade(passed, float(passed), reason)


async def _run_program(
    sandbox: Sandbox, code: str, settings: CodeBenchmarkSettings, stdin: str = ""
) -> tuple[bool, str, str]:
    result = await sandbox.run(Program(code, stdin=stdin), settings.sandbox_timeout_s)
    detail = result.detail or (result.stderr.strip().splitlines() or [""])[-1][:200]
    return result.status == "ok" and result.exit_code == 0, result.stdout, f"{result.status}: {detail}".strip(": ")


def _evalplus_task(name: str, repo: str, description: str, mbpp: bool) -> EvalTask:
    async def evaluate(model: EvalModel, settings: CodeBenchmarkSettings) -> TaskResult:
        rows = load_rows(HubDataset(repo, None, "test"), settings.dataset)
        items = []
        for i, row in enumerate(rows):
            where = f"{settings.dataset or repo} row {i + 1}"
            require(
                row,
                ("task_id", "prompt", "test_list", "test") if mbpp else ("task_id", "prompt", "test", "entry_point"),
                where,
            )
            messages, prefill = evalplus_prompt(mbpp_task_prompt(row) if mbpp else row["prompt"])
            check = "" if mbpp else f"\n\ncheck({row['entry_point']})\n"
            items.append(Item(messages, {"test": row["test"] + check, "task_id": row["task_id"]}, where, prefill))
        sandbox = open_sandbox(settings)

        async def grade(item: Item, reply: str) -> Grade:
            code = extract_code(reply)
            if code is None:
                return _verdict(False, "no fenced python block")
            passed, _, detail = await _run_program(sandbox, code + "\n\n" + item.record["test"], settings)
            return _verdict(passed, "all tests passed" if passed else f"failed ({detail})")

        try:
            return await evaluate_generation(model, items, grade, settings)
        finally:
            await sandbox.aclose()

    return EvalTask(name, description, evaluate, CodeBenchmarkSettings)


HUMANEVAL_PLUS = _evalplus_task(
    "humaneval_plus", "evalplus/humanevalplus", "HumanEval+ (164), EvalPlus prompt, sandbox", False
)
MBPP_PLUS = _evalplus_task("mbpp_plus", "evalplus/mbppplus", "MBPP+ (378), EvalPlus prompt, sandbox", True)


class _PlainUnpickler(pickle.Unpickler):
    """Reads pickles of plain data only: any class or function in the stream is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: the test cases are plain data")


def lcb_private_tests(encoded: str) -> list[dict[str, Any]]:
    """code_generation_lite's `private_test_cases`: JSON, or (most rows) base64 of zlib of a
    pickled JSON string, read without running anything the pickle names."""
    try:
        return list(json.loads(encoded))
    except ValueError:
        pass
    text = _PlainUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(encoded.encode("utf-8"))))).load()
    return list(json.loads(text))


def lcb_prompt(row: dict[str, Any]) -> list[Message]:
    """LiveCodeBench's generic chat prompt (`get_generic_question_template_answer`)."""
    text = f"### Question:\n{row['question_content']}\n\n"
    if row.get("starter_code"):
        text += f"### Format: {LCB_WITH_STARTER}\n```python\n{row['starter_code']}\n```\n\n"
    else:
        text += f"### Format: {LCB_WITHOUT_STARTER}\n```python\n# YOUR CODE HERE\n```\n\n"
    text += "### Answer: (use the provided format with backticks)\n\n"
    return [Message(role="system", content=LCB_SYSTEM), Message(role="user", content=text)]


FUNCTIONAL_HARNESS = """
import json as _json, sys as _sys
_cases = _json.loads({cases!r})
_results = []
for _case in _cases:
    try:
        _args = [_json.loads(_line) for _line in _case.split("\\n")]
        _results.append(_json.dumps(Solution().{func}(*_args)))
    except Exception as _exc:
        _results.append(None)
print(_json.dumps(_results))
"""


class LiveCodeBenchSettings(CodeBenchmarkSettings):
    release: str = Field("v6", pattern=r"^v[1-6]$", description="release_vN of code_generation_lite (v1 .. v6)")
    start_date: str | None = Field(None, description="only problems whose contest_date is on or after (YYYY-MM-DD)")
    end_date: str | None = Field(None, description="only problems whose contest_date is before (YYYY-MM-DD)")


def lcb_rows(settings: LiveCodeBenchSettings) -> list[dict[str, Any]]:
    rows = []
    repo = "livecodebench/code_generation_lite"
    for name in LCB_RELEASE_FILES[settings.release]:
        path = hub_file(repo, name, settings.dataset)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    rows.append({**json.loads(line), "_where": f"{path.name} line {n}"})
                except ValueError as exc:
                    raise DataError(f"{path} line {n}: not JSON ({exc})") from None
    date = lambda row: str(row.get("contest_date", ""))[:10]  # noqa: E731
    return [
        row
        for row in rows
        if (settings.start_date is None or date(row) >= settings.start_date)
        and (settings.end_date is None or date(row) < settings.end_date)
    ]


async def _livecodebench(model: EvalModel, settings: LiveCodeBenchSettings) -> TaskResult:
    items = []
    for row in lcb_rows(settings):
        where = row["_where"]
        require(row, ("question_content", "public_test_cases", "private_test_cases", "metadata"), where)
        tests = list(json.loads(row["public_test_cases"])) + lcb_private_tests(row["private_test_cases"])
        func = json.loads(row["metadata"] or "{}").get("func_name")
        items.append(Item(lcb_prompt(row), {"tests": tests, "func_name": func}, where))
    sandbox = open_sandbox(settings)

    async def grade(item: Item, reply: str) -> Grade:
        code = extract_code(reply)
        if code is None:
            return _verdict(False, "no fenced python block")
        tests: Sequence[dict[str, Any]] = item.record["tests"]
        if item.record["func_name"]:
            harness = FUNCTIONAL_HARNESS.format(
                cases=json.dumps([t["input"] for t in tests]), func=item.record["func_name"]
            )
            ran, stdout, detail = await _run_program(sandbox, code + "\n" + harness, settings)
            try:
                outputs = json.loads(stdout.strip().splitlines()[-1]) if ran else None
            except (ValueError, IndexError):
                outputs = None
            if outputs is None:
                return _verdict(False, f"failed ({detail})")
            passed = sum(
                out is not None and json.loads(out) == json.loads(t["output"])
                for out, t in zip(outputs, tests, strict=True)
            )
        else:
            passed = 0
            for test in tests:
                ran, stdout, detail = await _run_program(sandbox, code, settings, test["input"])
                if not (ran and outputs_match(stdout, test["output"])):
                    break
                passed += 1
        ok = passed == len(tests)
        return _verdict(ok, f"{passed}/{len(tests)} tests passed" if not ok else "all tests passed")

    try:
        return await evaluate_generation(model, items, grade, settings)
    finally:
        await sandbox.aclose()


LIVECODEBENCH = EvalTask(
    "livecodebench",
    "LiveCodeBench code generation (release, date window), sandbox",
    _livecodebench,
    LiveCodeBenchSettings,
)
