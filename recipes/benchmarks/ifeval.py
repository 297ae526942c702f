"""`ifeval`: google/IFEval (train, 541 prompts), the prompt as given, graded by IFEval's own
instruction checkers as the `if-verifiable` package ships them (the `evals` extra): strict (the
reply as it is) and loose (also with the first or last line or markdown asterisks removed), at
prompt level (every instruction followed) and instruction level (the share followed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from kitchen import ConfigError, DataError
from kitchen.families.evaluation import (
    Estimate,
    EvalModel,
    EvalSettings,
    EvalTask,
    Grade,
    HubDataset,
    Item,
    TaskResult,
    evaluate_generation,
    load_rows,
    mean_with_stderr,
    require,
)
from train_core.renderers.messages import Message

INSTALL_HINT = "ifeval needs the 'evals' extra (IFEval's instruction checkers): pip install 'kitchen[evals]'"


def _checkers() -> Any:
    try:
        from if_verifiable import IFEvalSample, evaluate_output_for_sample
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return IFEvalSample, evaluate_output_for_sample


def check_reply(row: dict[str, Any], reply: str) -> dict[str, list[bool]]:
    """Each instruction's strict and loose verdict on `reply`."""
    sample_cls, evaluate = _checkers()
    sample = sample_cls(row["key"], row["prompt"], list(row["instruction_id_list"]), [dict(k) for k in row["kwargs"]])
    try:
        results, _ = evaluate("ifeval", sample, reply)
    except LookupError as exc:  # NLTK data (the sentence counter's punkt model) not installed
        raise DataError(
            f"IFEval's checkers need NLTK data: python -m nltk.downloader punkt punkt_tab ({exc})"
        ) from None
    return {"strict": [r.strict_pass for r in results], "loose": [r.loose_pass for r in results]}


class IfevalSettings(EvalSettings):
    dataset: str | None = Field(None, description="a local copy of google/IFEval (default: the hub dataset)")
    max_tokens: int = Field(32768, ge=1, description="most tokens sampled per reply")
    temperature: float = Field(0.0, ge=0, description="sampling temperature")


def summarise_ifeval(items: Sequence[Item], grades_I: Sequence[Sequence[Grade]]) -> dict[str, Estimate]:
    """prompt_level_{strict,loose}_acc (the mean over prompts) and inst_level_{strict,loose}_acc
    (over all instructions of all prompts, IFEval's own micro average; its standard error is
    taken over prompts' instruction counts as a ratio estimate)."""
    metrics = {}
    for mode in ("strict", "loose"):
        per_prompt = [[g.details[mode] for g in grades] for grades in grades_I]
        metrics[f"prompt_level_{mode}_acc"] = mean_with_stderr(
            [sum(all(v) for v in samples) / len(samples) for samples in per_prompt]
        )
        followed = [sum(sum(v) for v in samples) / len(samples) for samples in per_prompt]
        counts = [len(samples[0]) for samples in per_prompt]
        ratio = sum(followed) / max(sum(counts), 1)
        n = len(counts)
        mean_count = sum(counts) / n
        residuals = [f - ratio * c for f, c in zip(followed, counts, strict=True)]
        variance = sum(r * r for r in residuals) / (n - 1) if n > 1 else None
        stderr = None if variance is None else (variance / n) ** 0.5 / mean_count
        metrics[f"inst_level_{mode}_acc"] = Estimate(ratio, stderr, n)
    return metrics


async def _ifeval(model: EvalModel, settings: IfevalSettings) -> TaskResult:
    _checkers()  # before any sampling: say which extra is missing
    hub = HubDataset("google/IFEval", None, "train")
    rows = load_rows(hub, settings.dataset)
    items = []
    for i, row in enumerate(rows):
        where = f"{settings.dataset or hub.repo} row {i + 1}"
        require(row, ("key", "prompt", "instruction_id_list", "kwargs"), where)
        items.append(Item([Message(role="user", content=row["prompt"])], {"row": row}, where))

    async def grade(item: Item, reply: str) -> Grade:
        verdicts = check_reply(item.record["row"], reply)
        strict, loose = all(verdicts["strict"]), all(verdicts["loose"])
        followed = f"{sum(verdicts['strict'])}/{len(verdicts['strict'])} instructions followed (strict)"
        return Grade(strict, float(strict), f"{followed}, loose {'all' if loose else 'not all'}", None, verdicts)

    return await evaluate_generation(model, items, grade, settings, summarise_ifeval)


IFEVAL = EvalTask("ifeval", "IFEval (541), IFEval's instruction checkers", _ifeval, IfevalSettings)
