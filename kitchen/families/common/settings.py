"""Settings the workflow families share, each declared once: the optimizer and its schedule, the
chat renderer, and the data/loop keys of the supervised and preference workflows.

A family's settings model (`kitchen.families.supervised.settings`, `kitchen.families.preference.settings`,
`kitchen.families.rl.settings`) combines these with its own keys; a recipe's config subclasses it and sets
its own defaults with `kitchen.engine.config.loading.defaults`, never by re-declaring a key.
"""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kitchen.engine.config.loading import Count, NonNegative, Rate, RunConfig
from kitchen.engine.errors import DataError
from kitchen.engine.renderers import renderer_names
from train_core.batching import batches_per_epoch

ADAM_KEYS = (
    "learning_rate",
    "lr_schedule",
    "warmup_steps",
    "adam_beta1",
    "adam_beta2",
    "adam_eps",
    "weight_decay",
    "grad_clip_norm",
)
"""The keys `kitchen.families.common.training.adam_params` reads: a stage that calls it declares them."""


def check_renderer_name(name: str | None) -> str | None:
    """`name` if it is None or a registered renderer, else a ValueError with a "did you mean"."""
    names = renderer_names()
    if name is not None and name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown renderer {name!r}{hint} (registered: {', '.join(names)})")
    return name


class OptimizerSettings(RunConfig):
    """AdamW and the learning-rate schedule."""

    learning_rate: Rate = Field(1e-4, description="AdamW learning rate (peak, after warmup)")
    lr_schedule: Literal["linear", "cosine", "constant"] = Field(
        "linear", description="learning rate after warmup: linear or cosine decay to 0 at the last step, or constant"
    )
    warmup_steps: NonNegative = Field(0, description="steps of linear warmup from 0 to learning_rate")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="AdamW first-moment decay")
    adam_beta2: float = Field(0.95, ge=0, lt=1, description="AdamW second-moment decay")
    adam_eps: float = Field(1e-8, gt=0, description="AdamW denominator epsilon")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay")
    grad_clip_norm: float = Field(0.0, ge=0, description="0 disables clipping")


class RendererSettings(RunConfig):
    """The chat renderer that turns messages into tokens (and replies back into messages)."""

    renderer: str | None = Field(None, description="renderer name; default: the one recommended for model_name")

    @field_validator("renderer")
    @classmethod
    def _registered_renderer(cls, name: str | None) -> str | None:
        return check_renderer_name(name)


class OtherModel(BaseModel):
    """A model other than the one trained (a distillation teacher, a judge): a base model, or a
    kitchen checkpoint of one. It must use the trained model's tokenizer where its logprobs are
    compared token by token."""

    model_config = ConfigDict(extra="forbid")

    model_name: str | None = Field(None, description="its base model (for its tokenizer); default: model_name")
    checkpoint: str | None = Field(
        None, description="sampler weights: a run directory (its last checkpoint) or a checkpoint path, or tinker://"
    )
    renderer: str | None = Field(None, description="its chat renderer where it writes text; default: the run's")

    @field_validator("renderer")
    @classmethod
    def _registered_renderer(cls, name: str | None) -> str | None:
        return check_renderer_name(name)


class DatasetSettings(RunConfig):
    """A train file (and optional held-out file) read in epochs of shuffled batches."""

    dataset: str = Field(..., description="JSONL / JSON / parquet file, or a hub dataset name")
    dataset_split: str = Field("train", description="hub datasets and multi-split folders: the split to train on")
    eval_dataset: str | None = Field(None, description="held-out file; none = no evaluation")
    eval_split: str = Field("test", description="hub datasets and multi-split folders: the held-out split")
    batch_size: Count = Field(32, description="records per optimizer step")
    num_epochs: Count = Field(1, description="passes over the data set (max_steps stops earlier)")
    max_steps: int | None = Field(None, ge=1, description="stop after this many steps")
    max_length: int | None = Field(1024, ge=2, description="tokens per sequence; longer ones are cut from the right")
    save_every: NonNegative = Field(20, description="checkpoint every N steps; 0 = only the final one")
    eval_every: NonNegative = Field(10, description="held-out evaluation every N steps and at the end; 0 = never")

    def num_steps(self, count: int, what: str, source: str, unit: str = "") -> int:
        """Optimizer steps over `count` training items (`what`, e.g. "examples"): full batches per
        epoch times `num_epochs`, cut at `max_steps`; a DataError naming `source` when the items
        do not fill one batch."""
        per_epoch = batches_per_epoch(count, self.batch_size)
        if per_epoch == 0:
            raise DataError(f"{source}: {count} {what} are fewer than one batch (batch_size={self.batch_size}{unit})")
        steps = per_epoch * self.num_epochs
        return steps if self.max_steps is None else min(steps, self.max_steps)
