"""What a recipe hands the RL workflow: its environments, a held-out set, and demonstrations."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.renderers.train_on_what import TrainOnWhat
from train_core.rl.model_slot import ModelSlot
from train_core.rl.types import EnvGroupBuilder, RLDataset


class DemonstrationSource(Protocol):
    """Correct conversations for the optional supervised warm start (e.g. generated solutions)."""

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]: ...


@dataclass(frozen=True)
class RLTask:
    """`train.get_batch(i)` gives step i's env groups (indices past the end wrap around, so a short
    dataset is cycled); `eval_builders` are scored with the current sampler every `eval_every`
    steps; `demonstrations` feed the warm start, trained on `demonstration_weights` messages."""

    train: RLDataset
    eval_builders: Sequence[EnvGroupBuilder] = ()
    demonstrations: DemonstrationSource | None = None
    demonstration_weights: TrainOnWhat = TrainOnWhat.ALL_ASSISTANT_MESSAGES
    warnings: Sequence[str] = ()
    """What the user should know before training starts (weak data, an unsafe setting): logged
    as warnings, so they reach stderr and the report."""
    notes: Sequence[str] = ()
    """What the user may want to know (how the sandbox bounds a program): logged as info events."""
    models: Sequence[ModelSlot] = ()
    """Other models the envs sample from (an opponent, an answerer, a grader): the run opens each
    and binds it before the first rollout."""


RLTaskFactory = Callable[[Any, Renderer], RLTask]
"""Builds a recipe's task from its config and the run's renderer."""

DataCheck = Callable[[Any, frozenset[str]], object]
"""Reads a recipe's data files from its config and the message roles its renderer supports, with
no renderer or tokenizer, raising on a bad record: the loaders its task factory uses, run before
anything starts (so by `kitchen validate` too)."""
