"""`bfcl`: the Berkeley Function Calling Leaderboard's non-live AST categories (simple_python,
multiple, parallel, parallel_multiple) in BFCL v4's prompting mode. The hub dataset
(gorilla-llm/Berkeley-Function-Calling-Leaderboard) holds these categories as its v3 files
(`BFCL_v3_simple.json` ..., `possible_answer/` beside them; v4 renamed `simple` to
`simple_python` and ships its files in the `bfcl-eval` package); a local copy may have either
naming. The prompt is v4's default system prompt with the functions as JSON, the
reply read as a Python list of calls, and each call matched against the possible answers by
BFCL's AST rules (function name; required parameters present, no unknown ones; each value of
the documented type and among the allowed values, strings compared without spaces, punctuation
or case; a parameter allowed "" may be left out; parallel calls in any order). Metric: accuracy
per category and their unweighted mean (`overall`), as BFCL's summary averages categories."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from kitchen import DataError
from kitchen.families.evaluation import (
    Estimate,
    EvalModel,
    EvalSettings,
    EvalTask,
    Grade,
    Item,
    TaskResult,
    evaluate_generation,
    hub_file,
    mean_with_stderr,
)
from train_core.renderers.messages import Message

REPO = "gorilla-llm/Berkeley-Function-Calling-Leaderboard"
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple")
HUB_NAMES = {
    "simple_python": "simple",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
}
"""Each category's name in the hub repo's v3 files."""

SYSTEM_PROMPT = (
    "You are an expert in composing functions."
    "You are given a question and a set of possible functions. Based on the question, you will need to make one or "
    "more function/tool calls to achieve the purpose. If none of the functions can be used, point it out. If the "
    "given question lacks the parameters required by the function, also point it out."
    "\n\nYou should only return the function calls in your response.\n\nIf you decide to invoke any of the "
    "function(s), you MUST put it in the format of [func_name1(params_name1=params_value1, params_name2=params_value2"
    "...), func_name2(params)]. {param_types} You SHOULD NOT include any other text in the response."
    "\n\nAt each turn, you should try your best to complete the tasks requested by the user within the current turn. "
    "Continue to output functions to call until you have fulfilled the user's request to the best of your ability. "
    "Once you have no more functions to call, the system will consider the current turn complete and proceed to the "
    "next turn or task.\n\nHere is a list of functions in json format that you can invoke.\n{functions}\n"
).replace("{param_types}", "")
"""bfcl-eval `constants/default_prompts.py`: the plaintext, classic, python-return, json-doc system
prompt (DEFAULT_SYSTEM_PROMPT_FORMAT) as `formulate_system_prompt` assembles it (the persona
and task sentences join with no space; the empty parameter-types note leaves two spaces)."""

TYPES: Mapping[str, tuple[type, ...]] = {
    "integer": (int,),
    "float": (float, int),
    "number": (float, int),
    "string": (str,),
    "boolean": (bool,),
    "array": (list,),
    "tuple": (list, tuple),
    "dict": (dict,),
}


def system_prompt(functions: Sequence[Mapping[str, Any]]) -> str:
    return SYSTEM_PROMPT.replace("{functions}", json.dumps(list(functions), indent=4))


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    raise ValueError("a call's function is not a (dotted) name")


def decode_calls(reply: str) -> list[dict[str, dict[str, Any]]]:
    """BFCL's `default_decode_ast_prompting`: the reply, stripped of backticks and blank lines
    and wrapped in brackets, parsed as a Python list of calls with literal arguments."""
    text = reply.strip("`\n ")
    text = text if text.startswith("[") else "[" + text
    text = text if text.endswith("]") else text + "]"
    tree = ast.parse(text, mode="eval").body
    elements = tree.elts if isinstance(tree, ast.List) else [tree]
    calls = []
    for element in elements:
        if not isinstance(element, ast.Call) or element.args:
            raise ValueError("not a list of calls with keyword arguments")
        calls.append({_name(element.func): {kw.arg or "": ast.literal_eval(kw.value) for kw in element.keywords}})
    return calls


def _standard(text: str) -> str:
    return re.sub(r"[ \,\.\/\-\_\*\^]", "", text).lower().replace("'", '"')


def _same(value: Any, allowed: Any) -> bool:
    if isinstance(value, str) and isinstance(allowed, str):
        return _standard(value) == _standard(allowed)
    if isinstance(value, list | tuple) and isinstance(allowed, list | tuple):
        return len(value) == len(allowed) and all(_same(v, a) for v, a in zip(value, allowed, strict=True))
    if isinstance(value, dict) and isinstance(allowed, dict):
        return all(
            _same(value[key], options[0] if isinstance(options, list) and len(options) == 1 else options)
            if key in value
            else isinstance(options, list) and "" in options
            for key, options in allowed.items()
        ) and set(value) <= set(allowed)
    if isinstance(value, bool) or isinstance(allowed, bool):
        return value is allowed
    if isinstance(value, int | float) and isinstance(allowed, int | float):
        return float(value) == float(allowed)
    return bool(value == allowed)


def check_call(call: Mapping[str, Mapping[str, Any]], doc: Mapping[str, Any], answer: Mapping[str, Any]) -> str | None:
    """Why `call` does not match the possible `answer` for the function `doc`, or None."""
    ((name, arguments),) = call.items()
    ((expected_name, allowed),) = answer.items()
    if name != expected_name:
        return f"called {name}, expected {expected_name}"
    properties = doc.get("parameters", {}).get("properties", {})
    for param in doc.get("parameters", {}).get("required", []):
        if param not in arguments:
            return f"{name}: missing required parameter {param!r}"
    for param, value in arguments.items():
        if param not in allowed:
            return f"{name}: unexpected parameter {param!r}"
        expected_type = TYPES.get(properties.get(param, {}).get("type", ""), (object,))
        if not isinstance(value, expected_type) or (isinstance(value, bool) and bool not in expected_type):
            return f"{name}: parameter {param!r} has type {type(value).__name__}"
        if not any(_same(value, option) for option in allowed[param] if option != ""):
            return f"{name}: parameter {param!r} = {value!r} is not among {allowed[param]!r}"
    for param, options in allowed.items():
        if param not in arguments and "" not in options:
            return f"{name}: missing parameter {param!r}"
    return None


def check_calls(
    calls: Sequence[Mapping[str, Mapping[str, Any]]], functions: Sequence[Mapping[str, Any]], answers: Sequence[Any]
) -> str | None:
    """The calls match the possible answers one to one, in any order; None, or why not."""
    if len(calls) != len(answers):
        return f"{len(calls)} calls, expected {len(answers)}"
    docs = {doc["name"]: doc for doc in functions}
    left = list(answers)
    for call in calls:
        ((name, _),) = call.items()
        if name not in docs:
            return f"called {name}, which is not among the functions"
        reasons = [check_call(call, docs[name], answer) for answer in left]
        if None not in reasons:
            return reasons[0]
        left.pop(reasons.index(None))
    return None


class BfclSettings(EvalSettings):
    dataset: str | None = Field(None, description="a local copy of the BFCL data folder (default: the hub dataset)")
    categories: list[str] = Field(
        list(CATEGORIES), description=f"the categories evaluated: any of {', '.join(CATEGORIES)}"
    )
    max_tokens: int = Field(32768, ge=1, description="most tokens sampled per reply")
    temperature: float = Field(0.001, ge=0, description="sampling temperature (BFCL's default 0.001)")


def _read_lines(path: Path) -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise DataError(f"{path} line {n}: not JSON ({exc})") from None
    return rows


def category_file(category: str, local: str | None) -> str:
    """The file of a category: the hub's v3 name, or in a local copy the v4 name where it has it
    (bfcl-eval's data folder), else the v3 one."""
    if local is not None and (Path(local) / f"BFCL_v4_{category}.json").is_file():
        return f"BFCL_v4_{category}.json"
    return f"BFCL_v3_{HUB_NAMES[category]}.json"


def bfcl_items(settings: BfclSettings) -> list[Item]:
    unknown = sorted(set(settings.categories) - set(CATEGORIES))
    if unknown:
        raise DataError(f"bfcl: unknown category {unknown[0]!r} (categories: {', '.join(CATEGORIES)})")
    items = []
    for category in settings.categories:
        name = category_file(category, settings.dataset)
        questions = _read_lines(hub_file(REPO, name, settings.dataset))
        answers = {
            row["id"]: row["ground_truth"]
            for row in _read_lines(hub_file(REPO, f"possible_answer/{name}", settings.dataset))
        }
        for row in questions:
            if row["id"] not in answers:
                raise DataError(f"{name} {row['id']}: no possible answer")
            turn = [Message(role=m["role"], content=m["content"]) for m in row["question"][0]]
            system = system_prompt(row["function"])
            if turn and turn[0]["role"] == "system":
                turn[0] = Message(role="system", content=system + "\n\n" + str(turn[0]["content"]))
            else:
                turn.insert(0, Message(role="system", content=system))
            record = {"category": category, "function": row["function"], "answers": answers[row["id"]], "id": row["id"]}
            items.append(Item(turn, record, f"{name} {row['id']}"))
    return items


async def grade_bfcl(item: Item, reply: str) -> Grade:
    try:
        calls = decode_calls(reply)
    except (SyntaxError, ValueError) as exc:
        return Grade(False, 0.0, f"not a list of calls: {exc}", None, {"category": item.record["category"]})
    reason = check_calls(calls, item.record["function"], item.record["answers"])
    ok = reason is None
    return Grade(
        ok, float(ok), reason or "calls match", json.dumps(calls, sort_keys=True), {"category": item.record["category"]}
    )


def summarise_bfcl(items: Sequence[Item], grades_I: Sequence[Sequence[Grade]]) -> dict[str, Estimate]:
    by_category: dict[str, list[float]] = {}
    for item, grades in zip(items, grades_I, strict=True):
        by_category.setdefault(item.record["category"], []).append(sum(g.correct for g in grades) / len(grades))
    metrics = {f"{category}_accuracy": mean_with_stderr(values) for category, values in by_category.items()}
    estimates = list(metrics.values())
    k = len(estimates)
    errors = [e.stderr for e in estimates]
    stderr = None if None in errors else sum(e * e for e in errors if e is not None) ** 0.5 / k
    metrics["overall"] = Estimate(sum(e.value for e in estimates) / k, stderr, sum(e.n for e in estimates))
    return metrics


async def _bfcl(model: EvalModel, settings: BfclSettings) -> TaskResult:
    return await evaluate_generation(model, bfcl_items(settings), grade_bfcl, settings, summarise_bfcl)


BFCL = EvalTask("bfcl", "BFCL non-live AST categories, prompting mode, AST match", _bfcl, BfclSettings)
