"""Settings the training families share, each declared once: the `optimizer` section (AdamW and
its schedule), the `data` section of the supervised and preference workflows, the held-out `eval`
period, the chat `renderer`, and `TrainingSettings`, the run keys plus the sections every training
family has.

A family's settings model (`kitchen.families.supervised.SupervisedSettings`, ...) adds its own
sections; a recipe's config subclasses it and sets its own defaults with
`kitchen.engine.config.loading.defaults` (`@defaults(optimizer=OptimizerSettings(learning_rate=3e-3))`),
never by re-declaring a key.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kitchen.engine.config.eval_schedule import EvalSchedule
from kitchen.engine.config.run import Count, NonNegative, Rate, RunConfig
from kitchen.engine.config.sections import RESUME_SAFE, RUN_LENGTH, Section
from kitchen.engine.errors import DataError
from kitchen.engine.renderers import renderer_names
from kitchen.families.common.checkpoint import CheckpointSettings
from train_core.batching import batches_per_epoch


def check_renderer_name(name: str | None) -> str | None:
    """`name` if it is None or a registered renderer, else a ValueError with a "did you mean"."""
    if name is None:
        return None  # the recommended one, chosen later: no need to load the registry here
    names = renderer_names()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown renderer {name!r}{hint} (registered: {', '.join(names)})")
    return name


class OptimizerSettings(Section):
    """Config section `optimizer`: AdamW and the learning-rate schedule (`adam_params` reads it)."""

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


class SamplingSettings(Section):
    """Config section `sampling`: how the trained policy samples its replies (RL's rollouts, online
    DPO's pairs); evaluations during training sample the same way unless they say otherwise."""

    max_tokens: Count = Field(16, description="sampled tokens per turn")
    temperature: float = Field(1.0, ge=0, description="sampling temperature (0: greedy)")


class RendererSettings(RunConfig):
    """The chat renderer that turns messages into tokens (and replies back into messages): a
    run-wide key, beside `model_name` (its default is the one recommended for that model)."""

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


class DataSettings(Section):
    """Config section `data`: a train file (and optional held-out file) read in epochs of shuffled
    batches."""

    dataset: str = Field(..., description="JSONL / JSON / parquet file, or a hub dataset name")
    dataset_split: str = Field("train", description="hub datasets and multi-split folders: the split to train on")
    eval_dataset: str | None = Field(
        None, description="held-out file; none = no evaluation", json_schema_extra=RESUME_SAFE
    )
    eval_split: str = Field(
        "test", description="hub datasets and multi-split folders: the held-out split", json_schema_extra=RESUME_SAFE
    )
    batch_size: Count = Field(32, description="records per optimizer step")
    num_epochs: Count = Field(
        1, description="passes over the data set (max_steps stops earlier)", json_schema_extra=RUN_LENGTH
    )
    max_steps: int | None = Field(None, ge=1, description="stop after this many steps", json_schema_extra=RUN_LENGTH)
    max_length: int | None = Field(1024, ge=2, description="tokens per sequence; longer ones are cut from the right")

    def num_steps(self, count: int, what: str, source: str, unit: str = "") -> int:
        """Optimizer steps over `count` training items (`what`, e.g. "examples"): full batches per
        epoch times `num_epochs`, cut at `max_steps`; a DataError naming `source` when the items
        do not fill one batch."""
        per_epoch = batches_per_epoch(count, self.batch_size)
        if per_epoch == 0:
            size = f"data.batch_size={self.batch_size}{unit}"
            raise DataError(f"{source}: {count} {what} are fewer than one batch ({size})")
        steps = per_epoch * self.num_epochs
        return steps if self.max_steps is None else min(steps, self.max_steps)


class HeldOutEval(EvalSchedule):
    """Config section `eval` of a training family: the eval tasks and best checkpoint of every run,
    and how often the family's own held-out evaluation runs (held-out NLL, reward, win rate)."""

    FLAT: ClassVar[Mapping[str, str]] = {**EvalSchedule.FLAT, "every": "eval_every"}

    every: NonNegative = Field(10, description="held-out evaluation every N steps and at the end; 0 = never")


class TrainingSettings(RunConfig):
    """The run keys and the sections every training family has: `optimizer`, `checkpoint`, `eval`."""

    optimizer: OptimizerSettings = Field(default_factory=OptimizerSettings, description="AdamW and its schedule")
    checkpoint: CheckpointSettings = Field(
        default_factory=CheckpointSettings, description="how often checkpoints are saved and how many are kept"
    )
    eval: HeldOutEval = Field(  # the run's eval section, with the family's period
        default_factory=HeldOutEval, description="evaluation during training", json_schema_extra=RESUME_SAFE
    )
