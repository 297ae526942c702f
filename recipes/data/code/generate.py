"""Generate the shipped function-writing problems (`train.jsonl`, `test.jsonl`), deterministically.

Each problem asks for a one-line function, with assert tests, the correct solution and a subtly
wrong one (for the sloppy teacher). Run: `python recipes/data/code/generate.py`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

SEED = 14
OUT = Path(__file__).parent
# name, statement, argument kind, correct body, subtly wrong body (both expressions in x)
Template = tuple[str, str, str, str, str]
TEMPLATES: list[Template] = [
    ("add_{k}", "returns x + {k}", "int", "x + {k}", "x + {k} + 1"),
    ("times_{k}", "returns x * {k}", "int", "x * {k}", "x * {k} + 1"),
    ("above_{k}", "returns True when x > {k}, else False", "int", "x > {k}", "x >= {k}"),
    ("clip_{k}", "returns the smaller of x and {k}", "int", "min(x, {k})", "max(x, {k})"),
    ("take_{k}", "returns the first {k} items of the list x", "list", "x[:{k}]", "x[:{k} - 1]"),
]
KS = range(2, 6)
"""Few families and constants: the embedded tiny model (449K parameters) can learn them all in a
short warm start, so the default run measures what RL adds (unlearning the teacher's slips), not
whether the tiny model can copy a name it has never seen. Larger models want real problem sets."""


def argument(rng: random.Random, kind: str) -> Any:
    if kind == "int":
        return rng.randint(-20, 20)
    if kind == "list":
        return [rng.randint(0, 8) for _ in range(rng.randint(0, 10))]
    return "".join(rng.choice("abcxyz") for _ in range(rng.randint(0, 10)))


def problem(rng: random.Random, template: Template, k: int) -> dict[str, Any]:
    """Four distinct test arguments, at least one of which the wrong body gets wrong."""
    name, statement, kind, body, wrong = (part.format(k=k) for part in template)
    right_fn, wrong_fn = eval(f"lambda x: {body}"), eval(f"lambda x: {wrong}")  # our own templates
    for _ in range(10_000):
        args = list({repr(a): a for a in (argument(rng, kind) for _ in range(4))}.values())
        if len(args) == 4 and any(right_fn(a) != wrong_fn(a) for a in args):
            break
    else:
        raise RuntimeError(f"{name}: no arguments tell the right body from the wrong one")
    return {
        "problem": f"Write a Python function `{name}(x)` that {statement}.",
        "tests": [f"assert {name}({a!r}) == {right_fn(a)!r}" for a in args],
        "solution": f"def {name}(x):\n    return {body}\n",
        "wrong_solution": f"def {name}(x):\n    return {wrong}\n",
    }


def main() -> None:
    rng = random.Random(SEED)
    problems = [problem(rng, template, k) for template in TEMPLATES for k in KS]
    rng.shuffle(problems)
    split = len(problems) * 3 // 4
    for file, part in (("train.jsonl", problems[:split]), ("test.jsonl", problems[split:])):
        (OUT / file).write_text("".join(json.dumps(p) + "\n" for p in part), encoding="utf-8")


if __name__ == "__main__":
    main()
