"""Multiple-choice benchmarks answered in words, the letter read from the reply.

- `gpqa_diamond`: Idavidrein/gpqa (gpqa_diamond, 198 questions), simple-evals' prompt and
  answer pattern; the four choices shuffled per question and repeat by a seeded permutation, as
  simple-evals does (`random.Random(0)`, `repeats` passes over the set);
- `mmlu_pro`: TIGER-Lab/MMLU-Pro (test, 12,032 questions), TIGER-Lab's 5-shot chain-of-thought
  prompt (the validation questions of the same category as examples) and its three-step
  extraction; a reply with no letter is scored as a seeded random guess, as TIGER-Lab scores it.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pydantic import Field

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

GPQA_PROMPT = (
    "Answer the following multiple choice question. The last line of your response should be of the following "
    "format: 'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by step before answering."
    "\n\n{Question}\n\nA) {A}\nB) {B}\nC) {C}\nD) {D}"
)
"""simple-evals `common.py`, QUERY_TEMPLATE_MULTICHOICE."""
GPQA_ANSWER = re.compile(r"(?i)Answer[ \t]*:[ \t]*\$?([A-D])\$?")
"""simple-evals `common.py`, ANSWER_PATTERN_MULTICHOICE."""

MMLU_PRO_HEADER = (
    "The following are multiple choice questions (with answers) about {}. Think step by step and then output the "
    'answer in the format of "The answer is (X)" at the end.\n\n'
)
"""TIGER-Lab MMLU-Pro `evaluate_from_api.py`, the prompt's first lines."""
LETTERS = "ABCDEFGHIJ"


def _user(text: str) -> list[Message]:
    return [Message(role="user", content=text)]


class GpqaSettings(EvalSettings):
    dataset: str | None = Field(None, description="a local copy of gpqa_diamond.csv (default: Idavidrein/gpqa)")
    repeats: int = Field(4, ge=1, description="passes over the questions, each with its own shuffle (simple-evals: 4)")
    max_tokens: int = Field(32768, ge=1, description="most tokens sampled per reply")
    temperature: float = Field(0.6, ge=0, description="sampling temperature")


def gpqa_items(rows: Sequence[dict[str, Any]], repeats: int, source: str) -> list[Item]:
    """simple-evals' GPQA examples: the rows `repeats` times, each with `rng.sample(range(4), 4)`
    from one `random.Random(0)`, drawn in order."""
    rng = random.Random(0)
    items = []
    for n, row in enumerate(list(rows) * repeats):
        where = f"{source} row {n % len(rows) + 1}"
        keys = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
        require(row, keys, where)
        choices = [str(row[key]) for key in keys[1:]]
        permutation = rng.sample(range(4), 4)
        shown = [choices[i] for i in permutation]
        letter = "ABCD"[shown.index(choices[0])]
        text = GPQA_PROMPT.format(Question=row["Question"], A=shown[0], B=shown[1], C=shown[2], D=shown[3])
        items.append(Item(_user(text), {"answer": letter}, where))
    return items


async def grade_gpqa(item: Item, reply: str) -> Grade:
    match = GPQA_ANSWER.search(reply)
    given = match.group(1) if match else None
    correct = given == item.record["answer"]
    return Grade(correct, float(correct), f"answer {given!r}, correct {item.record['answer']!r}", given)


async def _gpqa(model: EvalModel, settings: GpqaSettings) -> TaskResult:
    hub = HubDataset("Idavidrein/gpqa", "gpqa_diamond", "train")
    rows = load_rows(hub, settings.dataset)
    return await evaluate_generation(
        model, gpqa_items(rows, settings.repeats, settings.dataset or hub.repo), grade_gpqa, settings
    )


def mmlu_pro_example(question: str, options: Sequence[str], cot_content: str = "") -> str:
    """TIGER-Lab's `format_example`: the question, lettered options, and "Answer: " followed by the
    worked answer (an example) or "Let's think step by step." (the question asked)."""
    cot = cot_content or "Let's think step by step."
    cot = cot[3:] if cot.startswith("A: ") else cot
    text = f"Question: {question}\nOptions: " + "".join(f"{LETTERS[i]}. {option}\n" for i, option in enumerate(options))
    return text + "Answer: " + cot + "\n\n"


def _options(row: dict[str, Any]) -> list[str]:
    return [str(option) for option in row["options"] if option != "N/A"]


def mmlu_pro_prompt(row: dict[str, Any], examples: Sequence[dict[str, Any]]) -> str:
    """The whole prompt of one question: header, the category's examples, the question."""
    text = MMLU_PRO_HEADER.format(row["category"])
    text += "".join(mmlu_pro_example(e["question"], _options(e), e["cot_content"]) for e in examples)
    return text + mmlu_pro_example(row["question"], _options(row))


def mmlu_pro_answer(reply: str) -> str | None:
    """TIGER-Lab's extraction: "answer is (X)", else the last "Answer: X", else the last lone
    letter A-J; bold markers removed first."""
    reply = reply.replace("**", "")
    for pattern, flags in ((r"answer is \(?([A-J])\)?", 0), (r".*[aA]nswer:\s*([A-J])", 0)):
        match = re.search(pattern, reply, flags)
        if match:
            return match.group(1)
    match = re.search(r"\b[A-J]\b(?!.*\b[A-J]\b)", reply, re.DOTALL)
    return match.group(0) if match else None


class MmluProSettings(EvalSettings):
    dataset: str | None = Field(None, description="a local copy of TIGER-Lab/MMLU-Pro (a folder with data/)")
    max_tokens: int = Field(32768, ge=1, description="most tokens sampled per reply")
    temperature: float = Field(0.0, ge=0, description="sampling temperature (TIGER-Lab: 0)")


async def _mmlu_pro(model: EvalModel, settings: MmluProSettings) -> TaskResult:
    source = settings.dataset or "TIGER-Lab/MMLU-Pro"
    test = load_rows(HubDataset("TIGER-Lab/MMLU-Pro", None, "test"), settings.dataset)
    validation = load_rows(HubDataset("TIGER-Lab/MMLU-Pro", None, "validation"), settings.dataset)
    examples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in validation:
        examples[row["category"]].append(row)
    items = []
    for i, row in enumerate(test):
        where = f"{source} test row {i + 1}"
        require(row, ("question_id", "question", "options", "answer", "category"), where)
        record = {"answer": row["answer"], "question_id": row["question_id"], "options": len(_options(row))}
        items.append(Item(_user(mmlu_pro_prompt(row, examples[row["category"]])), record, where))

    async def grade(item: Item, reply: str) -> Grade:
        given = mmlu_pro_answer(reply)
        reason = ""
        if given is None:  # TIGER-Lab scores a reply without a letter as a random guess
            guess = random.Random(f"mmlu_pro/{settings.seed}/{item.record['question_id']}")
            given = LETTERS[guess.randrange(item.record["options"])]
            reason = "no letter: random guess "
        correct = given == item.record["answer"]
        return Grade(correct, float(correct), f"{reason}answer {given!r}, correct {item.record['answer']!r}", given)

    return await evaluate_generation(model, items, grade, settings)


GPQA_DIAMOND = EvalTask("gpqa_diamond", "GPQA diamond (198), simple-evals' prompt, 4 shuffles", _gpqa, GpqaSettings)
MMLU_PRO = EvalTask("mmlu_pro", "MMLU-Pro (12,032), TIGER-Lab's 5-shot CoT prompt", _mmlu_pro, MmluProSettings)
