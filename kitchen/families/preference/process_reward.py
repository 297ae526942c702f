"""The process-reward-model workflow (TRL's `PRMTrainer`): stepwise-supervision records read as
`[correct, wrong]` label-token datum pairs, trained with TRL's two-class cross-entropy at the
step ends through `forward_backward_custom`, and evaluated for held-out per-step and
per-trajectory accuracy. The data processing and the math are
`train_core.preference.process_reward`'s (which says how the LM stands in for TRL's
token-classification head)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.errors import DataError
from kitchen.engine.ports import Tokenizer, TrainingClient
from kitchen.engine.runs.datasets import is_hub_name, load_located_records
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Workflow
from kitchen.families.common.process_reward import ProcessRewardHead, StepTokenizer, label_token_ids
from kitchen.families.common.settings import DataSettings, OptimizerSettings, TrainingSettings
from kitchen.families.common.setup import CloseBackend, CreateTrainingClient, GetTokenizer
from kitchen.families.common.train_loop import pipelined_training
from kitchen.families.common.training import InFlight, PendingStep, forward_logprobs, loss_fn_metrics, submit_step
from kitchen.families.supervised.stages import Batch
from train_core.batching import batch_for_step
from train_core.errors import InvalidInputError
from train_core.preference.process_reward import (
    StepwiseExample,
    parse_stepwise,
    process_reward_loss,
    process_reward_metrics,
    step_datums,
    step_margins,
)
from train_core.types import Datum

DATUMS_PER_EXAMPLE = 2


class ProcessRewardSettings(TrainingSettings):
    """A process reward model on stepwise-supervision files; `data.batch_size` counts records."""

    data: DataSettings = Field(..., description="the stepwise files (prompt, completions, labels), batches, epochs")
    prm: ProcessRewardHead = Field(default_factory=ProcessRewardHead, description="step tokenisation and labels")


def read_stepwise(source: str, split: str = "train") -> list[StepwiseExample]:
    """A stepwise file (JSONL / JSON / parquet) or hub dataset (e.g. trl-lib/math_shepherd); a bad
    record is a DataError naming its file and line."""
    examples = []
    for where, record in load_located_records(source, split=split):
        try:
            examples.append(parse_stepwise(record))
        except InvalidInputError as exc:
            raise DataError(f"{where}: {exc}") from None
    if not examples:
        raise DataError(f"{source}: no records")
    return examples


def check_stepwise_files(config: Any) -> None:
    """The config's local stepwise files, read before anything starts."""
    data = config.data
    for source in (data.dataset, data.eval_dataset):
        if source and not is_hub_name(source):
            read_stepwise(source)


@dataclass(frozen=True)
class StepwiseData:
    train_data: list[Datum]
    eval_data: list[Datum]
    num_steps: int


class LoadStepwiseData(Stage):
    """Read the train (and optional held-out) stepwise files and tokenise every record into its
    two datums up front, so bad data is found before any training; a record whose labels were
    all cut by the length limits is skipped (and counted)."""

    def check_inputs(self, config: Any) -> None:
        check_stepwise_files(config)

    async def run(self, ctx: Context, tokenizer: Tokenizer, data: DataSettings, prm: ProcessRewardHead) -> StepwiseData:
        labels = label_token_ids(tokenizer, prm.label_tokens)
        tokenize = StepTokenizer(tokenizer, prm, data.max_length)

        def datums(source: str, split: str, training: bool) -> list[Datum]:
            out: list[Datum] = []
            skipped = 0
            for example in read_stepwise(source, split):
                pair = step_datums(*tokenize(example, training and prm.train_on_last_step_only), labels)
                skipped += not pair
                out += pair
            if skipped:
                ctx.log.warning("data.skipped", source=source, records=skipped, reason="no step label left after cuts")
            if not out:
                raise DataError(f"{source}: no record keeps a step label within the length limits")
            return out

        train = datums(data.dataset, data.dataset_split, True)
        count = len(train) // DATUMS_PER_EXAMPLE
        num_steps = data.num_steps(count, "usable records", data.dataset, unit=" records")
        held_out = datums(data.eval_dataset, data.eval_split, False) if data.eval_dataset else []
        ctx.log.info(
            "data.loaded", train_records=count, eval_records=len(held_out) // DATUMS_PER_EXAMPLE, num_steps=num_steps
        )
        return StepwiseData(train, held_out, num_steps)


class GetStepwiseBatch(Stage):
    """The step's `batch_size` records (two datums each): the epoch's seeded shuffle, full batches
    only, so a resumed run sees the batches an uninterrupted one would."""

    async def run(self, ctx: Context, train_data: list[Datum], data: DataSettings, run: RunConfig) -> Batch:
        count = len(train_data) // DATUMS_PER_EXAMPLE
        epoch, batch_index, picked = batch_for_step(ctx.step, count, data.batch_size, run.seed)
        ctx.record({"epoch": epoch, "batch": batch_index, "progress": (ctx.step + 1) / (ctx.total_steps or 1)})
        size = DATUMS_PER_EXAMPLE
        return Batch([datum for i in picked for datum in train_data[size * i : size * (i + 1)]])


def prm_custom_loss(data: Sequence[Datum], logprobs_D: list[Any]) -> tuple[Any, dict[str, float]]:
    """The custom loss for `forward_backward_custom` on a batch of `[correct, wrong]` pairs."""
    weights_D = [d.loss_fn_inputs["weights"].to_torch().to(lp.device) for d, lp in zip(data, logprobs_D, strict=True)]
    return process_reward_loss(step_margins(logprobs_D, weights_D))


class SubmitProcessRewardStep(Stage):
    """Submit the two-class cross-entropy forward-backward and the optimizer step; do not wait."""

    calls = (TrainingClient.forward_backward_custom, TrainingClient.optim_step)

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        batch: list[Datum],
        optimizer: OptimizerSettings,
        inflight: Sequence[PendingStep] = (),
    ) -> InFlight:
        return await submit_step(ctx, training_client, batch, prm_custom_loss, optimizer, inflight)


class EvaluateProcessRewardModel(Stage):
    """Held-out metrics, one forward pass (no gradients): `eval/step_accuracy`,
    `eval/trajectory_accuracy` (every step right), `eval/majority_baseline` (the share of the
    commoner label, what a constant answer scores), `eval/prm_loss`."""

    calls = (TrainingClient.forward,)

    async def run(
        self, ctx: Context, training_client: TrainingClient, eval_data: list[Datum], data: DataSettings
    ) -> None:
        if not eval_data:
            return
        size = DATUMS_PER_EXAMPLE * data.batch_size
        logprobs_D, weights_D = await forward_logprobs(training_client, eval_data, size)
        margins = step_margins(logprobs_D, weights_D)
        loss, _ = process_reward_loss(margins)
        ctx.record(
            {
                **{f"eval/{key}": value for key, value in process_reward_metrics(margins).items()},
                "eval/prm_loss": loss.item(),
                "eval/majority_baseline": majority_baseline(eval_data),
            }
        )


def majority_baseline(data: Sequence[Datum]) -> float:
    """The per-step accuracy of always answering the commoner label: each pair's first datum's
    weighted targets are the correct label tokens, so the label counts come from them."""
    counts: dict[int, int] = {}
    for datum in data[0::DATUMS_PER_EXAMPLE]:
        targets = datum.loss_fn_inputs["target_tokens"].to_torch()
        weights = datum.loss_fn_inputs["weights"].to_torch()
        for token in targets[weights > 0].tolist():
            counts[int(token)] = counts.get(int(token), 0) + 1
    total = sum(counts.values())
    return max(counts.values()) / total if total else 0.0


def process_reward_workflow() -> Workflow:
    """Process-reward-model training: no renderer (TRL's PRM reads raw text) and no reference
    model; one step stays in flight while the next batch is taken, and evaluations see the
    current step's weights."""
    return Workflow(
        name="process_reward_model",
        steps=[
            GetTokenizer(),
            LoadStepwiseData(),
            CreateTrainingClient(),
            *pipelined_training(
                [GetStepwiseBatch(), SubmitProcessRewardStep()], [EvaluateProcessRewardModel()], loss_fn_metrics
            ),
        ],
        finally_=[CloseBackend()],
    )
