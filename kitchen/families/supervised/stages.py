"""Stages of the supervised workflow: load the data set into datums, take the step's batch, and
measure held-out NLL. The train step itself is the shared `kitchen.families.common.training` pair."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from kitchen.engine.config.run import RunConfig
from kitchen.engine.config.sections import section_of
from kitchen.engine.context import Context
from kitchen.engine.errors import DataError
from kitchen.engine.ports import Tokenizer, TrainingClient
from kitchen.engine.runs.datasets import BuiltRecords, is_hub_name, load_located_records
from kitchen.engine.stage import Stage
from kitchen.families.common.settings import DataSettings
from kitchen.families.common.setup import message_roles
from kitchen.families.common.training import forward_logprobs
from kitchen.families.supervised.examples import ExampleBuilder, record_datum
from train_core.batching import batch_for_step
from train_core.errors import InvalidInputError
from train_core.renderers.base import Renderer
from train_core.renderers.messages import STANDARD_ROLES
from train_core.supervised import bits_per_byte, mean_nll, scored_bytes, sequence_nll
from train_core.types import Datum

MAX_REPORTED = 5

Source = tuple[str, str]
"""(file or hub name, split)."""


def _config_sources(data: DataSettings) -> tuple[Source, Source | None]:
    held_out = (data.eval_dataset, data.eval_split) if data.eval_dataset else None
    return (data.dataset, data.dataset_split), held_out


@dataclass(frozen=True)
class SupervisedData:
    train_data: Sequence[Datum]
    eval_data: Sequence[Datum]
    num_steps: int


class _LoadData(Stage):
    """Load, tokenize and shift the train (and optional eval) records into datums, up front, so
    bad data fails before any training; also decides the number of optimizer steps.

    A record of the wrong shape (a missing key, a number where text belongs, an unknown message
    role) stops the run with a DataError naming its file and line. A record with no token to train
    on (e.g. a conversation without the assistant message `train_on_what` selects, or a prompt that
    fills `max_length`) is skipped, logged, and counted as `data/<split>_skipped`; a file whose
    every record is skipped is an error.
    """

    uses_renderer = False
    reads_config_files = True

    def __init__(self, builder: ExampleBuilder, name: str | None = None) -> None:
        super().__init__(name)
        self.builder = builder

    def check_inputs(self, config: Any) -> None:
        """Each local record's fields and message roles, by the builder's `check` (files an
        earlier stage writes are checked as they are loaded)."""
        check = getattr(self.builder, "check", None)
        if check is None or not self.reads_config_files:
            return
        roles = message_roles(config) if self.uses_renderer else STANDARD_ROLES
        required = getattr(self.builder, "required_any", ())
        for source, split in filter(None, _config_sources(section_of(config, DataSettings))):
            if is_hub_name(source):
                continue
            for where, record in load_located_records(source, split=split, required_any=required):
                try:
                    check(record, roles)
                except InvalidInputError as exc:
                    raise DataError(f"{where}: {exc}") from None


class LoadSupervisedData(_LoadData):
    """The `data` section's `dataset` / `eval_dataset`, as examples the builder makes from tokens alone."""

    async def run(self, ctx: Context, tokenizer: Tokenizer, data: DataSettings) -> SupervisedData:
        train, held_out = _config_sources(data)
        return load_supervised_data(ctx, self.builder, tokenizer, None, data, train, held_out)


class LoadChatData(_LoadData):
    """The `data` section's `dataset` / `eval_dataset`, as examples rendered by the run's chat renderer."""

    uses_renderer = True

    async def run(self, ctx: Context, tokenizer: Tokenizer, renderer: Renderer, data: DataSettings) -> SupervisedData:
        train, held_out = _config_sources(data)
        return load_supervised_data(ctx, self.builder, tokenizer, renderer, data, train, held_out)


class LoadGeneratedChatData(_LoadData):
    """Chat examples from the files an earlier stage wrote (`data_files`: `{"train": path,
    "eval": path}`, e.g. a teacher's answers), instead of the `data` section's `dataset`."""

    uses_renderer = True
    reads_config_files = False

    async def run(
        self,
        ctx: Context,
        tokenizer: Tokenizer,
        renderer: Renderer,
        data_files: dict[str, str],
        data: DataSettings,
    ) -> SupervisedData:
        train = (data_files["train"], "train")
        held_out = (data_files["eval"], "train") if "eval" in data_files else None
        return load_supervised_data(ctx, self.builder, tokenizer, renderer, data, train, held_out)


def load_supervised_data(
    ctx: Context,
    builder: ExampleBuilder,
    tokenizer: Tokenizer,
    renderer: Renderer | None,
    data: DataSettings,
    train_source: Source,
    held_out: Source | None,
) -> SupervisedData:
    """The datums of the train and held-out files, and the number of optimizer steps."""
    train = _load(ctx, builder, tokenizer, renderer, data.max_length, *train_source, "train")
    num_steps = data.num_steps(len(train), "examples", train_source[0])
    eval_data = _load(ctx, builder, tokenizer, renderer, data.max_length, *held_out, "eval") if held_out else []
    ctx.log.info("data.loaded", train=len(train), eval=len(eval_data), num_steps=num_steps)
    return SupervisedData(train, eval_data, num_steps)


def _load(
    ctx: Context,
    builder: ExampleBuilder,
    tokenizer: Tokenizer,
    renderer: Renderer | None,
    max_length: int | None,
    source: str,
    split: str,
    name: str,
) -> Sequence[Datum]:
    required = getattr(builder, "required_any", ())
    records = load_located_records(source, split=split, required_any=required)
    build = partial(_datum, builder, tokenizer, renderer, max_length)
    kept, skipped = array("q"), []
    for index, (where, record) in enumerate(records):
        if build(where, record) is None:
            skipped.append(where)
        else:
            kept.append(index)
    data = BuiltRecords(records, partial(_kept_datum, build), kept)
    if skipped:
        first = ", ".join(skipped[:MAX_REPORTED]) + (", ..." if len(skipped) > MAX_REPORTED else "")
        ctx.log.warning("data.skipped", split=name, count=len(skipped), first=first, reason="no token to train on")
        # only when some were skipped: a clean data set adds no metric (and no row a resume changes)
        ctx.record({f"data/{name}_skipped": len(skipped)})
    if records and not data:
        raise DataError(
            f"{source}: none of its {len(records)} records has a token to train on (data.max_length={max_length}"
            + (f", train_on_what={builder.train_on_what}" if hasattr(builder, "train_on_what") else "")
            + "): check the data has completions/assistant messages, or raise data.max_length"
        )
    return data


def _kept_datum(build: Callable[[str, Any], Datum | None], where: str, record: Any) -> Datum:
    datum = build(where, record)
    assert datum is not None, "a kept record builds a datum"
    return datum


def _datum(
    builder: ExampleBuilder,
    tokenizer: Tokenizer,
    renderer: Renderer | None,
    max_length: int | None,
    where: str,
    record: Any,
) -> Datum | None:
    return record_datum(builder, record, where, tokenizer, renderer, max_length)


@dataclass(frozen=True)
class Batch:
    batch: list[Datum]


class GetSupervisedBatch(Stage):
    """The batch of the current step: the epoch's seeded shuffle, full batches only, so a
    resumed run sees exactly the batches an uninterrupted run would."""

    async def run(self, ctx: Context, train_data: Sequence[Datum], data: DataSettings, run: RunConfig) -> Batch:
        epoch, batch_index, indices = batch_for_step(ctx.step, len(train_data), data.batch_size, run.seed)
        ctx.record({"epoch": epoch, "batch": batch_index, "progress": (ctx.step + 1) / (ctx.total_steps or 1)})
        return Batch([train_data[i] for i in indices])


class EvaluateNLL(Stage):
    """Held-out mean NLL with a forward pass (no gradients), queued after the step's update, as
    `metric` (default `eval/nll`), and beside it the same in bits per byte of the scored text
    (`eval/bits_per_byte`: the metric's name with `nll` so replaced), which compares across
    tokenizers."""

    calls = (TrainingClient.forward,)

    def __init__(self, metric: str = "eval/nll", name: str | None = None) -> None:
        super().__init__(name)
        self.metric = metric
        self.bpb_metric = metric.replace("nll", "bits_per_byte")

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        eval_data: Sequence[Datum],
        tokenizer: Tokenizer,
        data: DataSettings,
    ) -> None:
        if not eval_data:
            return
        size = data.batch_size
        logprobs_D, weights_D = await forward_logprobs(training_client, eval_data, size)
        decode = partial(tokenizer.decode, skip_special_tokens=True)
        bytes_D = [scored_bytes(datum, decode) for datum in eval_data]
        ctx.record(
            {
                self.metric: mean_nll(logprobs_D, weights_D),
                self.bpb_metric: bits_per_byte(sequence_nll(logprobs_D, weights_D), bytes_D),
            }
        )
