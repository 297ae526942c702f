"""Grading model-written Python against tests, designed so that only solving the problem pays.

Code format: the reply's last fenced block tagged `python`, `py`, `python3` or untagged is the
solution; a reply with no such (closed) block is a format failure. Unfenced replies are not run:
prose would be executed as code, and asking for a fence costs a model nothing.

Assert tests (`assert f(2) == 5`). The solution and the assert statements must run in one
interpreter, and inside one interpreter the solution can do anything: exit early with status 0,
rebind `print` or `sys.stdout`, return an object whose `__eq__` is always true, find and print
whatever success marker the harness uses. So nothing the sandboxed program says is trusted as a
verdict. Each top-level `assert` is split here, outside the sandbox: the parts that are literals
(`5`, `[1, 2]`, `1e-6`) stay with the grader and never enter the sandbox; only the other parts
(`f(2)`) are evaluated there and *reported* as plain values (exact built-in types only, so no
always-equal objects). The grader then evaluates the comparison itself on those values. A program
that exits early reports nothing and fails; a forged report must hold the right values, which is
solving the problem.

The report channel is out of the program's reach: the harness forks, the solution runs in the
child (stdin on /dev/null, its prints moved to stderr) and sends its records through a pipe; the
parent, made non-dumpable so the child cannot read its memory or open its fds through /proc,
reads the per-run nonce from stdin only after the fork and relays each well-formed record to the
original stdout prefixed with the nonce. Whatever reaches the grader is still checked field by
field: a malformed report is a failed assert, never an exception in the trainer.

Tests must therefore be top-level `assert` statements (other statements, e.g. setup, are fine),
and an assert is only as strong as its literal parts: `assert f(x) == g(y)` with both sides
computed in the sandbox can be forged. Asserts inside loops or functions are rejected.

Stdin/stdout cases (`{"input": ..., "output": ...}`, as in APPS / DeepCoder / LiveCodeBench): the
solution runs once per case with the input on stdin; the expected output never enters the
sandbox, and outputs are compared line by line with surrounding whitespace stripped.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from train_core.errors import InvalidInputError

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
PYTHON_TAGS = frozenset({"", "python", "py", "python3"})
SOLUTION_FILE = "solution.py"
TESTS_FILE = "tests.json"
MAX_REPORT_DEPTH = 64


def extract_code(reply: str) -> str | None:
    """The last fenced Python (or untagged) block of `reply`, or None: a format failure."""
    blocks = [body for tag, body in _FENCE.findall(reply) if tag.lower() in PYTHON_TAGS]
    return blocks[-1] if blocks else None


@dataclass(frozen=True)
class TestVerdict:
    """How many tests passed, and why the first failing one failed."""

    passed: int
    total: int
    detail: str = ""

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


# ---- stdin/stdout cases -------------------------------------------------------------------------


@dataclass(frozen=True)
class StdioCase:
    input: str
    output: str


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().splitlines()]


def outputs_match(actual: str, expected: str) -> bool:
    """Equal line by line after stripping each line and the whole text (trailing blanks ignored)."""
    return _lines(actual) == _lines(expected)


# ---- assert tests: the grader's side ------------------------------------------------------------

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}


@dataclass(frozen=True)
class Known:
    """A literal part of an assert: held by the grader, never sent to the sandbox."""

    value: Any


@dataclass(frozen=True)
class Reported:
    """The `index`-th value the sandbox reports for its assert."""

    index: int


@dataclass(frozen=True)
class Compare:
    operands: tuple[Check, ...]
    ops: tuple[Callable[[Any, Any], Any], ...]


@dataclass(frozen=True)
class Not:
    operand: Check


@dataclass(frozen=True)
class All:
    operands: tuple[Check, ...]


Check = Known | Reported | Compare | Not | All


def _split(node: ast.expr, leaves: list[str]) -> Check:
    """The grader-side tree of an assert's test; sandbox-side parts are appended to `leaves`."""
    try:
        return Known(ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.Compare):
        operands = tuple(_split(part, leaves) for part in (node.left, *node.comparators))
        return Compare(operands, tuple(_COMPARE[type(op)] for op in node.ops))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return Not(_split(node.operand, leaves))
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return All(tuple(_split(part, leaves) for part in node.values))
    leaves.append(ast.unparse(node))
    return Reported(len(leaves) - 1)


def _evaluate(check: Check, values: Sequence[Any]) -> Any:
    if isinstance(check, Known):
        return check.value
    if isinstance(check, Reported):
        return values[check.index]
    if isinstance(check, Not):
        return not _evaluate(check.operand, values)
    if isinstance(check, All):
        return all(_evaluate(part, values) for part in check.operands)
    results = [_evaluate(part, values) for part in check.operands]
    return all(op(a, b) for op, a, b in zip(check.ops, results, results[1:], strict=False))


@dataclass(frozen=True)
class AssertPlan:
    """Per test, the grader-side tree of each of its asserts, and the steps the sandbox runs."""

    checks: tuple[tuple[Check, ...], ...]
    steps: tuple[tuple[dict[str, Any], ...], ...]


def plan_assert_tests(tests: Sequence[str]) -> AssertPlan:
    """Split each test (Python source with top-level asserts) into grader and sandbox parts."""
    if not tests:
        raise InvalidInputError("assert tests: no tests given")
    all_checks, all_steps = [], []
    for number, source in enumerate(tests):
        try:
            module = ast.parse(source)
        except SyntaxError as exc:
            raise InvalidInputError(f"test {number}: not valid Python: {exc.msg} (line {exc.lineno})") from None
        checks: list[Check] = []
        steps: list[dict[str, Any]] = []
        for statement in module.body:
            if isinstance(statement, ast.Assert):
                leaves: list[str] = []
                checks.append(_split(statement.test, leaves))
                steps.append({"check": len(checks) - 1, "leaves": leaves})
            elif any(isinstance(node, ast.Assert) for node in ast.walk(statement)):
                raise InvalidInputError(
                    f"test {number}: an assert inside a compound statement cannot be graded safely; "
                    "write each assert as a top-level statement"
                )
            else:
                steps.append({"exec": ast.unparse(statement)})
        if not checks:
            raise InvalidInputError(f"test {number}: holds no assert statement")
        all_checks.append(tuple(checks))
        all_steps.append(tuple(steps))
    return AssertPlan(tuple(all_checks), tuple(all_steps))


def _decode(encoded: Any, depth: int = 0) -> Any:
    """A reported value back into a plain Python value; anything malformed raises ValueError."""
    if depth > MAX_REPORT_DEPTH:
        raise ValueError("report nested too deeply")
    if encoded is None or isinstance(encoded, bool):
        return encoded
    if not isinstance(encoded, list) or not encoded or not isinstance(encoded[0], str):
        raise ValueError(f"malformed report value {encoded!r:.80}")
    tag, *rest = encoded
    scalars: dict[str, Callable[..., Any]] = {
        "i": int,
        "f": float.fromhex,
        "s": str,
        "b": bytes.fromhex,
        "c": lambda re_, im: complex(float.fromhex(re_), float.fromhex(im)),
    }
    try:
        if tag in scalars and all(isinstance(part, str) for part in rest):
            return scalars[tag](*rest)
        (items,) = rest
        if tag == "d":
            return {_decode(k, depth + 1): _decode(v, depth + 1) for k, v in items}
        containers: dict[str, Callable[[list[Any]], Any]] = {"l": list, "t": tuple, "S": set, "F": frozenset}
        return containers[tag]([_decode(item, depth + 1) for item in items])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed report value {encoded!r:.80}: {exc}") from None


def read_reports(stdout: str, nonce: str) -> list[dict[str, Any]]:
    """The harness's report lines (`{nonce} {json object}`); other output is ignored."""
    prefix = nonce + " "
    reports = []
    for line in stdout.splitlines():
        if line.startswith(prefix):
            try:
                report = json.loads(line[len(prefix) :])
            except json.JSONDecodeError:
                continue
            if isinstance(report, dict):
                reports.append(report)
    return reports


def _index(value: Any) -> int | None:
    """A report's test or assert number: a plain int, or None for anything else."""
    return value if type(value) is int else None


def grade_assert_reports(plan: AssertPlan, reports: Sequence[dict[str, Any]]) -> TestVerdict:
    """A test passes when each of its asserts was reported exactly once and holds on the values.
    Reports of the wrong shape count for nothing, so the assert they claim to answer fails."""
    total = len(plan.checks)
    load_errors = [r["load"] for r in reports if "load" in r]
    if load_errors:
        return TestVerdict(0, total, f"solution failed to load: {str(load_errors[0])[:300]}")
    values: dict[tuple[int, int], list[list[Any]]] = {}
    errors: dict[int, str] = {}
    for report in reports:
        test = _index(report.get("t"))
        if test is None:
            continue
        if "e" in report:
            errors.setdefault(test, str(report["e"])[:300])
        elif (number := _index(report.get("a"))) is not None and isinstance(report.get("v"), list):
            values.setdefault((test, number), []).append(report["v"])
    passed, first_failure = 0, ""
    for test, checks in enumerate(plan.checks):
        failure = errors.get(test, "")
        for index, check in enumerate(checks):
            if failure:
                break
            reported = values.get((test, index), [])
            if len(reported) != 1:
                failure = f"assert {index} reported {len(reported)} times"
                break
            try:
                holds = bool(_evaluate(check, [_decode(v) for v in reported[0]]))
            except Exception as exc:  # a malformed report or an incomparable value: the assert fails
                failure = f"assert {index}: {type(exc).__name__}: {exc}"
                break
            if not holds:
                failure = f"assert {index} does not hold"
        if failure:
            first_failure = first_failure or f"test {test}: {failure}"
        else:
            passed += 1
    return TestVerdict(passed, total, first_failure)


def _bare_call(leaf: str) -> bool:
    try:
        return isinstance(ast.parse(leaf, mode="eval").body, ast.Call)
    except SyntaxError:
        return False


def passes_returning_none(plan: AssertPlan) -> bool:
    """Whether every assert holds for a program whose functions all return None (`assert f(2) is
    None`, `assert not f(3)`): such tests pay for a program that does nothing. Decided on the
    grader's side, without running anything; an assert with other sandbox-side parts than bare
    calls is taken to fail."""
    for checks, steps in zip(plan.checks, plan.steps, strict=True):
        leaves = {step["check"]: step["leaves"] for step in steps if "check" in step}
        for index, check in enumerate(checks):
            if not all(_bare_call(leaf) for leaf in leaves[index]):
                return False
            try:
                if not _evaluate(check, [None] * len(leaves[index])):
                    return False
            except Exception:  # None compared with a number, say: the assert fails
                return False
    return True


# ---- assert tests: the program that runs in the sandbox -----------------------------------------

ASSERT_HARNESS = r"""
import json
import os
import sys

PLAIN = {type(None): None, bool: None, int: "i", float: "f", complex: "c", str: "s", bytes: "b",
         list: "l", tuple: "t", set: "S", frozenset: "F", dict: "d"}


def encode(value, depth=0, type=type, int_repr=int.__repr__, hexf=float.hex, hexb=bytes.hex):
    kind = type(value)
    if depth > MAX_DEPTH or kind not in PLAIN:
        raise TypeError("cannot report a value of type " + kind.__name__)
    tag = PLAIN[kind]
    if tag is None:
        return value
    if tag == "i":
        return [tag, int_repr(value)]
    if tag == "f":
        return [tag, hexf(value)]
    if tag == "c":
        return [tag, hexf(value.real), hexf(value.imag)]
    if tag == "s":
        return [tag, value]
    if tag == "b":
        return [tag, hexb(value)]
    if tag == "d":
        return [tag, [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]]
    return [tag, [encode(item, depth + 1) for item in value]]


def relay(read_fd, channel, nonce, loads=json.loads, dumps=json.dumps):
    # Forward the solution process's records to the grader: one JSON object per line, anything
    # else dropped (the grader treats a missing report as a failed assert).
    with os.fdopen(read_fd, "rb") as pipe:
        for line in pipe:
            try:
                record = loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict) and "done" not in record:
                os.write(channel, (nonce + " " + dumps(record) + "\n").encode())


def run_solution(write_fd, BaseException=BaseException, repr=repr, dumps=json.dumps):
    # In the forked solution process: run the solution and the sandbox-side parts of each test,
    # sending records through the pipe. It never holds the nonce or the report channel.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the nonce arrives on stdin after the fork, for the relay only
    os.dup2(2, 1)  # the program's own prints go to stderr

    def report(record):
        os.write(write_fd, (dumps(record) + "\n").encode())

    with open(TESTS_FILE) as handle:
        tests = json.load(handle)
    with open(SOLUTION_FILE) as handle:
        source = handle.read()
    namespace = {"__name__": "solution"}
    try:
        exec(compile(source, SOLUTION_FILE, "exec"), namespace)
    except BaseException as exc:
        report({"load": type(exc).__name__ + ": " + repr(exc)[:300]})
        return
    for number, steps in enumerate(tests):
        try:
            for step in steps:
                if "exec" in step:
                    exec(step["exec"], namespace)
                else:
                    values = [eval(leaf, namespace) for leaf in step["leaves"]]
                    report({"t": number, "a": step["check"], "v": [encode(v) for v in values]})
        except BaseException as exc:
            report({"t": number, "e": type(exc).__name__ + ": " + repr(exc)[:300]})


def main():
    # Not dumpable: the solution process (same uid) cannot read this one's memory or open its fds
    # through /proc, so the nonce and the report channel stay out of its reach.
    import ctypes

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            run_solution(write_fd)
        finally:
            for stream in (sys.__stdout__, sys.__stderr__):
                try:
                    stream.flush()
                except BaseException:
                    pass
            os._exit(0)
    os.close(write_fd)
    nonce = sys.stdin.readline().strip()
    channel = os.dup(1)
    os.dup2(2, 1)
    relay(read_fd, channel, nonce)
    os.waitpid(pid, 0)
    os.write(channel, (nonce + ' {"done": true}\n').encode())


main()
"""


@dataclass(frozen=True)
class HarnessProgram:
    """What to hand a sandbox: the main file, its extra files and stdin (which carries the nonce)."""

    code: str
    files: dict[str, str]
    stdin: str


def assert_harness(solution: str, plan: AssertPlan, nonce: str) -> HarnessProgram:
    """The sandbox program that runs `solution` and reports the sandbox-side parts of each assert."""
    if not re.fullmatch(r"[0-9a-f]{16,}", nonce):
        raise ValueError("the harness nonce must be at least 16 lowercase hex digits")
    header = f"MAX_DEPTH = {MAX_REPORT_DEPTH}\nTESTS_FILE = {TESTS_FILE!r}\nSOLUTION_FILE = {SOLUTION_FILE!r}\n"
    return HarnessProgram(
        code=header + ASSERT_HARNESS,
        files={SOLUTION_FILE: solution, TESTS_FILE: json.dumps([list(steps) for steps in plan.steps])},
        stdin=nonce + "\n",
    )
