"""Generative tasks: sample replies to each item's prompt, grade them, and summarise the grades as
accuracy, pass@k, maj@k and mean reward, each with its standard error over items.

Every item's request gets its own seed, derived from the settings' seed and the item's index, so
the same model, items and seed give the same replies whatever else is in flight.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kitchen.engine.eval_tasks import EvalModel, EvalSettings, SampleRecord, TaskResult
from train_core.eval_stats import Estimate, majority_vote, mean_with_stderr, pass_at_k, pass_at_k_values
from train_core.renderers.base import Message
from train_core.renderers.messages import content_parts


@dataclass(frozen=True)
class Item:
    """One prompt to answer, and what its grader needs (a reference answer, tests, ...)."""

    prompt: list[Message]
    record: Mapping[str, Any] = field(default_factory=dict)
    where: str = ""
    """Where it came from, for error messages: `FILE line N`, `problem N`."""


@dataclass(frozen=True)
class Grade:
    correct: bool
    score: float
    """The reward (1.0 / 0.0 for a plain right / wrong)."""
    reason: str = ""
    answer: str | None = None
    """The reply's final answer in a canonical spelling, for majority voting; None: no answer."""


ItemGrader = Callable[[Item, str], Awaitable[Grade]]
"""Grades one reply (its parsed text) to an item."""


def item_seed(seed: int, index: int) -> int:
    """A 63-bit sampling seed for item `index`, stable across runs and platforms."""
    digest = hashlib.sha256(f"kitchen-eval/{seed}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def as_text(messages: Sequence[Message]) -> str:
    """The conversation as text; an image part shows as `[image]`."""
    return "\n".join(f"{m['role']}: {_content_text(m)}" for m in messages)


def _content_text(message: Message) -> str:
    return "".join(part.get("text", "[image]") for part in content_parts(message))


async def _answer(model: EvalModel, item: Item, index: int, settings: EvalSettings) -> list[str]:
    renderer = model.renderer
    params = settings.sampling_params(item_seed(settings.seed, index), renderer.get_stop_sequences())
    result = await model.sampler.sample(renderer.build_generation_prompt(item.prompt), settings.samples, params)
    replies = []
    for sequence in result.sequences:
        message, _ = renderer.parse_response(sequence.tokens)
        content = message.get("content", "")
        replies.append(content if isinstance(content, str) else str(content))
    return replies


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


async def evaluate_generation(
    model: EvalModel, items: Sequence[Item], grade: ItemGrader, settings: EvalSettings
) -> TaskResult:
    """Sample `settings.samples` replies per item (at most `settings.concurrency` items in flight),
    grade every reply, and summarise."""
    items = list(items)[: settings.limit]
    if not items:
        raise ValueError("the task has no items to evaluate")
    gate = asyncio.Semaphore(settings.concurrency)

    async def one(index: int, item: Item) -> list[tuple[str, Grade]]:
        async with gate:
            replies = await _answer(model, item, index, settings)
        return [(reply, await grade(item, reply)) for reply in replies]

    graded_I = await asyncio.gather(*(one(i, item) for i, item in enumerate(items)))
    records = [
        SampleRecord(
            prompt=as_text(item.prompt),
            response=reply,
            grade=grade_.score,
            reason=grade_.reason,
            extra={"item": i, "sample": k, "correct": grade_.correct, "answer": grade_.answer, "where": item.where},
        )
        for i, (item, graded) in enumerate(zip(items, graded_I, strict=True))
        for k, (reply, grade_) in enumerate(graded)
    ]
    return TaskResult(summarise([[g for _, g in graded] for graded in graded_I]), records)
