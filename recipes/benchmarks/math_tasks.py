"""Math benchmarks, graded by math-verify on the answer the prompt asks for.

- `gsm8k`: openai/gsm8k (main, test), with simple-evals' MGSM prompt (English: GSM8K's own
  problems): the answer is the last number after the last "Answer:";
- `math500`: HuggingFaceH4/MATH-500, `aime24`: HuggingFaceH4/aime_2024, `aime25`:
  math-ai/aime25, with simple-evals' MATH prompt: the answer is the text after the first
  "Answer:" (simple-evals asks a model whether it equals the reference; math-verify decides here).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
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
    load_rows,
    require,
)
from train_core.renderers.messages import Message
from train_core.rl.math_grading import grade_answer, parse_gsm8k_answer

MGSM_EN_PROMPT = (
    "Solve this math problem. Give the reasoning steps before giving the final answer on the last line by itself "
    'in the format of "Answer:". Do not add anything other than the integer answer after "Answer:".\n\n{input}'
)
"""simple-evals `mgsm_eval.py`, LANG_TO_INSTRUCTIONS["en"]."""

MATH_PROMPT = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $ANSWER (without quotes) where $ANSWER is the answer to the problem.\n\n{Question}\n\n"
    'Remember to put your answer on its own line after "Answer:", and you do not need to use a \\boxed command.'
)
"""simple-evals `math_eval.py`, QUERY_TEMPLATE."""

ANSWER_PATTERN = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
"""simple-evals `common.py`, ANSWER_PATTERN: the first "Answer:" line."""
_NUMBER = re.compile(r"\d+\.?\d*")


def mgsm_answer(reply: str) -> str | None:
    """simple-evals' MGSM `parse_answer`: after the last "Answer", the last number (commas
    dropped, a trailing point removed); None when there is none."""
    if "Answer" not in reply:
        return None
    numbers = _NUMBER.findall(reply.split("Answer")[-1].strip().replace(",", ""))
    return numbers[-1].rstrip(".") if numbers else None


def math_answer(reply: str) -> str | None:
    """The text after the first "Answer:" (simple-evals' ANSWER_PATTERN), or None."""
    match = ANSWER_PATTERN.search(reply)
    return match.group(1).strip() if match else None


def _user(text: str) -> list[Message]:
    return [Message(role="user", content=text)]


def _grader(extract: Callable[[str], str | None]) -> Callable[[Item, str], Any]:
    async def grade(item: Item, reply: str) -> Grade:
        reference = str(item.record["answer"])
        given = extract(reply)
        if given is None:
            return Grade(False, 0.0, 'no "Answer:" line')
        correct = grade_answer(f"${given}$" if "$" not in given else given, reference)
        return Grade(correct, float(correct), f"answer {given!r} {'=' if correct else '!='} {reference!r}", given)

    return grade


class MathBenchmarkSettings(EvalSettings):
    dataset: str | None = Field(None, description="a local copy of the benchmark's data (default: the hub dataset)")
    max_tokens: int = Field(32768, ge=1, description="most tokens sampled per reply (reasoning models think long)")
    temperature: float = Field(0.6, ge=0, description="sampling temperature (the field reports 0.6, top-p 0.95)")


def _gsm8k_items(rows: list[dict[str, Any]], source: str) -> list[Item]:
    items = []
    for i, row in enumerate(rows):
        where = f"{source} row {i + 1}"
        require(row, ("question", "answer"), where)
        answer = parse_gsm8k_answer(str(row["answer"]), where=f"{where} field 'answer'")
        items.append(Item(_user(MGSM_EN_PROMPT.format(input=row["question"])), {"answer": answer}, where))
    return items


def _problem_items(problem_key: str) -> Callable[[list[dict[str, Any]], str], list[Item]]:
    def build(rows: list[dict[str, Any]], source: str) -> list[Item]:
        items = []
        for i, row in enumerate(rows):
            where = f"{source} row {i + 1}"
            require(row, (problem_key, "answer"), where)
            if not str(row["answer"]).strip():
                raise DataError(f"{where}: empty 'answer'")
            items.append(
                Item(_user(MATH_PROMPT.format(Question=row[problem_key])), {"answer": str(row["answer"])}, where)
            )
        return items

    return build


def _task(
    name: str,
    description: str,
    hub: HubDataset,
    build: Callable[[list[dict[str, Any]], str], list[Item]],
    extract: Callable[[str], str | None],
) -> EvalTask:
    grade = _grader(extract)

    async def evaluate(model: EvalModel, settings: MathBenchmarkSettings) -> TaskResult:
        rows = load_rows(hub, settings.dataset)
        return await evaluate_generation(model, build(rows, settings.dataset or hub.repo), grade, settings)

    return EvalTask(name, description, evaluate, MathBenchmarkSettings)


HUB: Mapping[str, HubDataset] = {
    "gsm8k": HubDataset("openai/gsm8k", "main", "test"),
    "math500": HubDataset("HuggingFaceH4/MATH-500", None, "test"),
    "aime24": HubDataset("HuggingFaceH4/aime_2024", None, "train"),
    "aime25": HubDataset("math-ai/aime25", None, "test"),
}

GSM8K = _task("gsm8k", "GSM8K test (1319), simple-evals' MGSM prompt", HUB["gsm8k"], _gsm8k_items, mgsm_answer)
MATH500 = _task(
    "math500",
    "MATH-500, simple-evals' MATH prompt, math-verify",
    HUB["math500"],
    _problem_items("problem"),
    math_answer,
)
AIME24 = _task(
    "aime24", "AIME 2024 (30), simple-evals' MATH prompt", HUB["aime24"], _problem_items("problem"), math_answer
)
AIME25 = _task(
    "aime25", "AIME 2025 (30), simple-evals' MATH prompt", HUB["aime25"], _problem_items("problem"), math_answer
)
