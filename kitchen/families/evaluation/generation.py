"""Generative tasks: sample replies to each item's prompt, grade them, and summarise the grades as
accuracy, pass@k, maj@k and mean reward, each with its standard error over items.

Every item's request gets its own seed, derived from the settings' seed and the item's index, so
the same model, items and seed give the same replies whatever else is in flight. A reasoning
model's thinking (the renderer's `thinking` field, or `<think>` spans left in the text) is never
graded: only the answer after it is. With `thinking_budget` set, a reply thinks at most that many
tokens (budget forcing, `kitchen.families.evaluation.thinking_budget`) and each sample records its
token accounting. Where a journal is open (`kitchen eval` opens one per task), each item's graded
samples are appended to it as soon as they are in, and an item already there is not sampled
again: an interrupted evaluation resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kitchen.engine.errors import DataError
from kitchen.engine.eval_tasks import EvalModel, EvalSettings, SampleRecord, TaskResult
from kitchen.families.evaluation.thinking_budget import BudgetedReply, ThinkTokens, sample_within_budget
from train_core.eval_stats import Estimate, majority_vote, mean_with_stderr, pass_at_k, pass_at_k_values
from train_core.renderers.base import Message
from train_core.renderers.messages import content_parts
from train_core.types import EncodedTextChunk


@dataclass(frozen=True)
class Item:
    """One prompt to answer, and what its grader needs (a reference answer, tests, ...)."""

    prompt: list[Message]
    record: Mapping[str, Any] = field(default_factory=dict)
    where: str = ""
    """Where it came from, for error messages: `FILE line N`, `problem N`."""
    prefill: str = ""
    """Text the reply starts with, written into the prompt after the generation prompt (EvalPlus
    opens the assistant's code block this way); the graded reply includes it."""


@dataclass(frozen=True)
class Grade:
    correct: bool
    score: float
    """The reward (1.0 / 0.0 for a plain right / wrong)."""
    reason: str = ""
    answer: str | None = None
    """The reply's final answer in a canonical spelling, for majority voting; None: no answer."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """Task-specific facts of the grade (per-instruction results, the reply's length), kept in
    the samples file and read by a task's own summary."""


ItemGrader = Callable[[Item, str], Awaitable[Grade]]
"""Grades one reply (its parsed text) to an item."""

USAGE_FIELDS = ("tokens", "thinking_tokens", "budget_forced")
"""A sample's token accounting under a thinking budget: the reply's tokens (the forced
end-of-thinking token included), its thinking tokens, and whether the budget closed its thinking."""


@dataclass(frozen=True)
class Graded:
    """One graded reply, with its token accounting (`USAGE_FIELDS`; empty without a thinking budget)."""

    reply: str
    grade: Grade
    usage: Mapping[str, Any] = field(default_factory=dict)


def item_seed(seed: int, index: int) -> int:
    """A 63-bit sampling seed for item `index`, stable across runs and platforms."""
    digest = hashlib.sha256(f"kitchen-eval/{seed}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def as_text(messages: Sequence[Message]) -> str:
    """The conversation as text; an image part shows as `[image]`."""
    return "\n".join(f"{m['role']}: {_content_text(m)}" for m in messages)


def _content_text(message: Message) -> str:
    return "".join(part.get("text", "[image]") for part in content_parts(message))


_THINK_SPAN = re.compile(r"<think>.*?</think>", re.DOTALL)


def strip_thinking(text: str) -> str:
    """The answer part of a reply: `<think>...</think>` spans removed, and a reply still
    thinking when it was cut off (an unclosed `<think>`) has none."""
    text = _THINK_SPAN.sub("", text)
    if "</think>" in text:  # a template that opens the span in the prompt: only the close is sampled
        text = text.rsplit("</think>", 1)[1]
    opened = text.find("<think>")
    return (text if opened < 0 else text[:opened]).strip()


async def _answer(
    model: EvalModel, item: Item, index: int, settings: EvalSettings
) -> list[tuple[str, Mapping[str, Any]]]:
    """Each sampled reply's answer text and token accounting (none without a thinking budget)."""
    renderer = model.renderer
    seed = item_seed(settings.seed, index)
    params = settings.sampling_params(seed, renderer.get_stop_sequences())
    prompt = renderer.build_generation_prompt(item.prompt)
    if item.prefill:
        prompt = prompt.append(EncodedTextChunk(tuple(model.tokenizer.encode(item.prefill, add_special_tokens=False))))
    budget = settings.thinking_budget
    if budget is None:
        result = await model.sampler.sample(prompt, settings.samples, params)
        return [(_answer_text(model, item, sequence.tokens), {}) for sequence in result.sequences]
    seeds = [item_seed(seed, k) for k in range(settings.samples)]
    replies = await sample_within_budget(
        model.sampler, ThinkTokens.of(renderer), prompt, settings.samples, params, budget, seeds
    )
    return [(_answer_text(model, item, reply.tokens), _usage(reply)) for reply in replies]


def _answer_text(model: EvalModel, item: Item, tokens: Sequence[int]) -> str:
    message, _ = model.renderer.parse_response(tokens)
    content = "".join(part.get("text", "") for part in content_parts(message))
    return strip_thinking(item.prefill + content)


def _usage(reply: BudgetedReply) -> dict[str, Any]:
    return {"tokens": len(reply.tokens), "thinking_tokens": reply.thinking_tokens, "budget_forced": reply.budget_forced}


def usage_metrics(graded_I: Sequence[Sequence[Graded]]) -> dict[str, Estimate]:
    """Over items, the mean per sample of its `tokens` and `thinking_tokens`, and the share of
    samples whose thinking the budget closed (`budget_forced`); none where nothing was counted."""
    if not all(g.usage for graded in graded_I for g in graded):
        return {}
    return {
        key: mean_with_stderr([sum(float(g.usage[key]) for g in graded) / len(graded) for graded in graded_I])
        for key in USAGE_FIELDS
    }


def summarise(grades_I: Sequence[Sequence[Grade]]) -> dict[str, Estimate]:
    """Metrics over items, each item holding its K samples' grades: `accuracy` (the mean share of
    correct samples, which is pass@1), `pass@k` for k = 2, 4, ... and K, `maj@K` (the majority
    answer's sample is correct) and `mean_reward`."""
    samples = {len(grades) for grades in grades_I}
    if len(samples) != 1:
        raise ValueError(f"every item needs the same number of samples, got {sorted(samples)}")
    (k_max,) = samples
    correct_I = [sum(grade.correct for grade in grades) for grades in grades_I]
    metrics = {"accuracy": mean_with_stderr([c / k_max for c in correct_I])}
    for k in pass_at_k_values(k_max)[1:]:
        metrics[f"pass@{k}"] = mean_with_stderr([pass_at_k(k_max, c, k) for c in correct_I])
    if k_max > 1:
        votes_I = [majority_vote([grade.answer for grade in grades]) for grades in grades_I]
        metrics[f"maj@{k_max}"] = mean_with_stderr(
            [float(vote is not None and grades[vote].correct) for vote, grades in zip(votes_I, grades_I, strict=True)]
        )
    metrics["mean_reward"] = mean_with_stderr([sum(g.score for g in grades) / k_max for grades in grades_I])
    return metrics


@dataclass
class Journal:
    """The per-sample JSONL of one task while it runs: graded samples are appended item by item,
    and `done` holds what an earlier, interrupted run of the same task already graded."""

    path: Path
    task: str
    done: dict[int, list[Graded]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path, task: str) -> Journal:
        """The journal at `path`, with the items an earlier run completed (a last line cut off
        mid-write is dropped)."""
        done: dict[int, list[Graded]] = {}
        if path.is_file():
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                try:
                    grade = Grade(
                        bool(row["correct"]), float(row["grade"]), row["reason"], row["answer"], row.get("details", {})
                    )
                    usage = {key: row[key] for key in USAGE_FIELDS if key in row}
                    done.setdefault(int(row["item"]), []).append(Graded(row["response"], grade, usage))
                except (KeyError, TypeError, ValueError) as exc:
                    raise DataError(f"{path} line {n}: not a graded sample ({type(exc).__name__}: {exc})") from None
        return cls(path, task, done)

    def record(self, index: int, item: Item, graded: Sequence[Graded]) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.writelines(
                json.dumps(_sample_fields(self.task, index, k, item, sample), ensure_ascii=False) + "\n"
                for k, sample in enumerate(graded)
            )


JOURNAL: ContextVar[Journal | None] = ContextVar("kitchen_eval_journal", default=None)
"""The journal of the task running in this context (`kitchen eval` sets it; training does not)."""

Summary = Callable[[Sequence[Item], Sequence[Sequence[Grade]]], dict[str, Estimate]]
"""A task's own metrics from its items and their grades (default: `summarise`)."""


def _extra(index: int, k: int, item: Item, sample: Graded) -> dict[str, Any]:
    grade_ = sample.grade
    extra: dict[str, Any] = {"item": index, "sample": k, "correct": grade_.correct, "answer": grade_.answer}
    if grade_.details:
        extra["details"] = dict(grade_.details)
    return {**extra, **sample.usage, "where": item.where}


def _sample_fields(task: str, index: int, k: int, item: Item, sample: Graded) -> dict[str, Any]:
    """A samples-file line (`results.sample_line`'s fields)."""
    return {
        "task": task,
        "prompt": as_text(item.prompt),
        "response": sample.reply,
        "grade": sample.grade.score,
        "reason": sample.grade.reason,
        **_extra(index, k, item, sample),
    }


async def evaluate_generation(
    model: EvalModel,
    items: Sequence[Item],
    grade: ItemGrader,
    settings: EvalSettings,
    summary: Summary | None = None,
) -> TaskResult:
    """Sample `settings.samples` replies per item (at most `settings.concurrency` items in flight),
    grade every reply, and summarise (`summary`, default `summarise`; with a thinking budget, the
    `usage_metrics` too)."""
    items = list(items)[: settings.limit]
    if not items:
        raise ValueError("the task has no items to evaluate")
    gate = asyncio.Semaphore(settings.concurrency)
    journal = JOURNAL.get()

    async def one(index: int, item: Item) -> list[Graded]:
        earlier = journal.done.get(index) if journal is not None else None
        if earlier is not None and len(earlier) == settings.samples:
            return earlier
        async with gate:
            replies = await _answer(model, item, index, settings)
        graded = [Graded(reply, await grade(item, reply), usage) for reply, usage in replies]
        if journal is not None:
            journal.record(index, item, graded)
        return graded

    graded_I = await asyncio.gather(*(one(i, item) for i, item in enumerate(items)))
    records = [
        SampleRecord(
            as_text(item.prompt), sample.reply, sample.grade.score, sample.grade.reason, _extra(i, k, item, sample)
        )
        for i, (item, graded) in enumerate(zip(items, graded_I, strict=True))
        for k, sample in enumerate(graded)
    ]
    grades_I = [[sample.grade for sample in graded] for graded in graded_I]
    metrics = (summary or (lambda _, grades: summarise(grades)))(items, grades_I)
    if settings.thinking_budget is not None:
        metrics = {**metrics, **usage_metrics(graded_I)}
    return TaskResult(metrics, records)
