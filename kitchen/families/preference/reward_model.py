"""Stages that train and evaluate learned pairwise judges (preference models).

- `WriteComparisonConversations`: comparison files (any DPO layout) rewritten as chat examples for
  the supervised workflow: a preference model's examples (each comparison in both orderings), or
  the completions themselves (a supervised warm start on them).
- `EvaluatePreferenceModel`: held-out accuracy and position bias of the model being trained, as
  a judge (no sampling).

The stages that put a judge in a run's state are `kitchen.families.preference.judges`'.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from kitchen.engine.config.sections import section_of
from kitchen.engine.context import Context
from kitchen.engine.errors import DataError
from kitchen.engine.ports import SamplingClient, TrainingClient
from kitchen.engine.runs.datasets import load_records
from kitchen.engine.stage import Stage
from kitchen.families.common.completers import PreferenceModelJudge
from kitchen.families.preference.settings import ComparisonData, ComparisonFiles, JudgeEvalSettings
from train_core.errors import DataFormatError
from train_core.preference.comparison_prompt import both_orderings, comparison_example
from train_core.preference.datasets import load_comparisons
from train_core.preference.types import LabeledComparison
from train_core.renderers.base import Message, Renderer

ExampleKind = Literal["preference_model", "chosen", "both"]


def comparison_records(source: str) -> list[tuple[int, dict[str, Any]]] | None:
    """The records of a comparison source that is not a JSONL file (a `datasets.save_to_disk`
    folder, JSON, parquet), numbered from 1; None for JSONL, which `load_comparisons` reads itself
    (naming lines)."""
    if Path(source).suffix == ".jsonl":
        return None
    return [(number, dict(record)) for number, record in enumerate(load_records(source), start=1)]


def read_comparisons(path: str, layout: str, max_length: int | None = None) -> list[LabeledComparison]:
    """A comparison file's usable comparisons, each message cut for `max_length` tokens."""
    try:
        comparisons, _ = load_comparisons(path, layout, max_length=max_length, records=comparison_records(path))  # type: ignore[arg-type]
    except DataFormatError as exc:
        raise DataError(str(exc)) from None
    return comparisons


def check_comparison_files(config: BaseModel) -> None:
    """The config's comparison files (its `data` section's `dataset`, `eval_dataset` in
    `dataset_layout`), read before anything starts (a `Stage.check_inputs` and an RL `DataCheck`)."""
    data = section_of(config, ComparisonFiles)
    for source in (data.dataset, data.eval_dataset):
        if source:
            read_comparisons(source, data.dataset_layout)


def conversations(comparisons: Sequence[LabeledComparison], kind: ExampleKind, allow_tie: bool) -> list[list[Message]]:
    """The chat examples of `kind` built from labeled comparisons."""
    if kind == "preference_model":
        return [comparison_example(labeled, allow_tie) for labeled in both_orderings(comparisons)]
    examples = []
    for labeled in comparisons:
        chosen, rejected = labeled.chosen_and_rejected()
        prompt = labeled.comparison.prompt_conversation
        examples.append([*prompt, *chosen])
        if kind == "both":
            examples.append([*prompt, *rejected])
    return examples


@dataclass(frozen=True)
class ComparisonExamples:
    data_files: dict[str, str]
    eval_comparisons: list[LabeledComparison]


class WriteComparisonConversations(Stage):
    """Rewrite the comparison files as `{"messages": [...]}` JSONL under the run directory
    (`RUN_DIR/data/{train,eval}.jsonl`) and put their paths under `data_files` for
    `LoadGeneratedChatData`; keep the held-out comparisons under `eval_comparisons` for evaluators.

    `kind`: `preference_model` (each comparison in both orderings, answered `A` / `B`), `chosen`
    (the preferred completions) or `both` (chosen and rejected: a deliberately mixed warm start).
    Each message is cut for `max_length` tokens (`train_core.supervised.cut_messages`).
    """

    def __init__(self, kind: ExampleKind, name: str | None = None) -> None:
        super().__init__(name)
        self.kind = kind

    def check_inputs(self, config: Any) -> None:
        check_comparison_files(config)

    async def run(self, ctx: Context, data: ComparisonData) -> ComparisonExamples:
        folder = (ctx.run_dir or Path(".")) / "data"
        folder.mkdir(parents=True, exist_ok=True)
        files: dict[str, str] = {}
        held_out: list[LabeledComparison] = []
        for split, source in (("train", data.dataset), ("eval", data.eval_dataset)):
            if source is None:
                continue
            labeled = read_comparisons(source, data.dataset_layout, data.max_length)
            if split == "eval":
                held_out = labeled
            lines = [json.dumps({"messages": c}) for c in conversations(labeled, self.kind, data.allow_tie)]
            path = folder / f"{split}.jsonl"
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            files[split] = str(path)
        return ComparisonExamples(files, held_out)


def preference_accuracy(scores_chosen_as_B: Sequence[float], scores_chosen_as_A: Sequence[float]) -> dict[str, float]:
    """Judge metrics on labeled pairs asked in both orderings: `accuracy` (share of the 2n
    judgements that prefer the chosen completion strictly), `position_bias` (mean lean towards B,
    (s1 + s2) / 2 per pair), `margin` (mean score in the chosen completion's favour)."""
    n = len(scores_chosen_as_B)
    if n == 0 or n != len(scores_chosen_as_A):
        raise ValueError(f"{n} and {len(scores_chosen_as_A)} scores: need the same non-zero count")
    right = sum(s > 0 for s in scores_chosen_as_B) + sum(s < 0 for s in scores_chosen_as_A)
    return {
        "accuracy": right / (2 * n),
        "position_bias": sum(b + a for b, a in zip(scores_chosen_as_B, scores_chosen_as_A, strict=True)) / (2 * n),
        "margin": sum(b - a for b, a in zip(scores_chosen_as_B, scores_chosen_as_A, strict=True)) / (2 * n),
        "num_pairs": float(n),
    }


class EvaluatePreferenceModel(Stage):
    """The model being trained, as a judge, on the first `judge_eval.pairs` held-out comparisons
    in both orderings: `eval/judge_accuracy`, `eval/judge_position_bias`, `eval/judge_margin`."""

    calls = (TrainingClient.save_weights_and_get_sampling_client, SamplingClient.compute_logprobs)

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        renderer: Renderer,
        eval_comparisons: list[LabeledComparison],
        judge_eval: JudgeEvalSettings,
        data: ComparisonFiles,
    ) -> None:
        pairs = eval_comparisons[: judge_eval.pairs]
        if not pairs:
            return
        client = await training_client.save_weights_and_get_sampling_client()
        judge = PreferenceModelJudge(client, renderer, data.allow_tie)

        async def both(labeled: LabeledComparison) -> tuple[float, float]:
            chosen, rejected = labeled.chosen_and_rejected()
            prompt = labeled.comparison.prompt_conversation
            return await asyncio.gather(judge(prompt, rejected[0], chosen[0]), judge(prompt, chosen[0], rejected[0]))

        scores = await asyncio.gather(*(both(labeled) for labeled in pairs))
        metrics = preference_accuracy([b for b, _ in scores], [a for _, a in scores])
        ctx.record({f"eval/judge_{key}": value for key, value in metrics.items()})
