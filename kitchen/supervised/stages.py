"""Stages of the supervised workflow: load the data set into datums, take the step's batch, and
measure held-out NLL. The train step itself is the shared `kitchen.stages.training` pair."""

from __future__ import annotations

from typing import Any

from kitchen.context import Context
from kitchen.datasets import is_hub_name, load_located_records
from kitchen.errors import DataError
from kitchen.stage import Stage
from kitchen.stages.setup import message_roles
from kitchen.supervised.examples import ExampleBuilder, record_datum
from train_core.batching import batch_for_step, batches_per_epoch
from train_core.errors import InvalidInputError
from train_core.renderers.messages import STANDARD_ROLES
from train_core.supervised import mean_nll
from train_core.types import Datum

MAX_REPORTED = 5


def _config_sources(config: Any) -> tuple[tuple[str, str], tuple[str, str] | None]:
    held_out = (config.eval_dataset, config.eval_split) if config.eval_dataset else None
    return (config.dataset, config.dataset_split), held_out


class LoadSupervisedData(Stage):
    """Load, tokenize and shift the train (and optional eval) records into datums, up front, so
    bad data fails before any training; also decides the number of optimizer steps.

    The files are the config's `dataset` / `eval_dataset`, or, with `files_key`, the ones an
    earlier stage wrote to that state key (`{"train": path, "eval": path}`, e.g. generated data).

    A record of the wrong shape (a missing key, a number where text belongs, an unknown message
    role) stops the run with a DataError naming its file and line. A record with no token to train
    on (e.g. a conversation without the assistant message `train_on_what` selects, or a prompt that
    fills `max_length`) is skipped, logged, and counted as `data/<split>_skipped`; a file whose
    every record is skipped is an error.
    """

    writes = ("train_data", "eval_data", "num_steps")

    def __init__(
        self,
        builder: ExampleBuilder,
        needs_renderer: bool = False,
        files_key: str | None = None,
        name: str | None = None,
    ):
        super().__init__(name)
        self.builder = builder
        self.files_key = files_key
        self.reads = ("tokenizer", *(("renderer",) if needs_renderer else ()), *((files_key,) if files_key else ()))
        sources = () if files_key else ("dataset", "dataset_split", "eval_dataset", "eval_split")
        self.config_keys = (*sources, "batch_size", "num_epochs", "max_steps", "max_length")

    def _sources(self, ctx: Context) -> tuple[tuple[str, str], tuple[str, str] | None]:
        """(train file, split) and (eval file, split) or None."""
        if self.files_key is not None:
            files = ctx[self.files_key]
            return (files["train"], "train"), ((files["eval"], "train") if "eval" in files else None)
        return _config_sources(ctx.config)

    def check_inputs(self, config: Any) -> None:
        """Each local record's fields and message roles, by the builder's `check` (files an
        earlier stage writes are checked when they are loaded)."""
        check = getattr(self.builder, "check", None)
        if check is None or self.files_key is not None:
            return
        roles = message_roles(config) if "renderer" in self.reads else STANDARD_ROLES
        required = getattr(self.builder, "required_any", ())
        for source, split in filter(None, _config_sources(config)):
            if is_hub_name(source):
                continue
            for where, record in load_located_records(source, split=split, required_any=required):
                try:
                    check(record, roles)
                except InvalidInputError as exc:
                    raise DataError(f"{where}: {exc}") from None

    def _load(self, ctx: Context, source: str, split: str, name: str) -> list[Datum]:
        required = getattr(self.builder, "required_any", ())
        records = load_located_records(source, split=split, required_any=required)
        renderer = ctx["renderer"] if "renderer" in self.reads else None
        max_length = ctx.config.max_length
        data, skipped = [], []
        for where, record in records:
            datum = record_datum(self.builder, record, where, ctx["tokenizer"], renderer, max_length)
            if datum is None:
                skipped.append(where)
                continue
            data.append(datum)
        if skipped:
            first = ", ".join(skipped[:MAX_REPORTED]) + (", ..." if len(skipped) > MAX_REPORTED else "")
            ctx.log.warning("data.skipped", split=name, count=len(skipped), first=first, reason="no token to train on")
            # only when some were skipped: a clean data set adds no metric (and no row a resume changes)
            ctx.record({f"data/{name}_skipped": len(skipped)})
        if records and not data:
            raise DataError(
                f"{source}: none of its {len(records)} records has a token to train on (max_length={max_length}"
                + (f", train_on_what={self.builder.train_on_what}" if hasattr(self.builder, "train_on_what") else "")
                + "): check the data has completions/assistant messages, or raise max_length"
            )
        return data

    async def run(self, ctx: Context) -> None:
        config = ctx.config
        (train_file, train_split), held_out = self._sources(ctx)
        train = self._load(ctx, train_file, train_split, "train")
        per_epoch = batches_per_epoch(len(train), config.batch_size)
        if per_epoch == 0:
            raise DataError(
                f"{train_file}: {len(train)} examples are fewer than one batch (batch_size={config.batch_size})"
            )
        num_steps = per_epoch * config.num_epochs
        if config.max_steps is not None:
            num_steps = min(num_steps, config.max_steps)
        ctx["train_data"] = train
        ctx["eval_data"] = self._load(ctx, *held_out, "eval") if held_out else []
        ctx["num_steps"] = num_steps
        ctx.log.info("data.loaded", train=len(train), eval=len(ctx["eval_data"]), num_steps=num_steps)


class GetSupervisedBatch(Stage):
    """The batch of the current step: the epoch's seeded shuffle, full batches only, so a
    resumed run sees exactly the batches an uninterrupted run would."""

    reads = ("train_data",)
    writes = ("batch",)
    config_keys = ("batch_size", "seed")

    async def run(self, ctx: Context) -> None:
        data = ctx["train_data"]
        epoch, batch_index, indices = batch_for_step(ctx.step, len(data), ctx.config.batch_size, ctx.config.seed)
        ctx["batch"] = [data[i] for i in indices]
        ctx.record({"epoch": epoch, "batch": batch_index, "progress": (ctx.step + 1) / (ctx.total_steps or 1)})


class EvaluateNLL(Stage):
    """Held-out mean NLL with a forward pass (no gradients), queued after the step's update, as
    `metric` (default `eval/nll`)."""

    reads = ("training_client", "eval_data")
    calls = ("TrainingClient.forward",)
    config_keys = ("batch_size",)

    def __init__(self, metric: str = "eval/nll", name: str | None = None) -> None:
        super().__init__(name)
        self.metric = metric

    async def run(self, ctx: Context) -> None:
        data = ctx["eval_data"]
        if not data:
            return
        client = ctx["training_client"]
        size = ctx.config.batch_size
        futures = [await client.forward(data[i : i + size], "cross_entropy") for i in range(0, len(data), size)]
        logprobs_D = [out["logprobs"].to_torch() for fut in futures for out in (await fut).loss_fn_outputs]
        weights_D = [datum.loss_fn_inputs["weights"].to_torch() for datum in data]
        ctx.record({self.metric: mean_nll(logprobs_D, weights_D)})
