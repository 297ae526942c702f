"""A trained process reward model (the `prm` recipe's checkpoint) as an RL reward: the `reward_fn`
environment's `env.process_reward` section. Each reply is split into steps on the PRM's step
separator, tokenised as the PRM was trained (TRL's `tokenize_row`), and each step's P(correct) =
`sigmoid(log p(pos) - log p(neg))` read at the step's end with `compute_logprobs` (no sampling);
the reply's reward is their `min`, `product` or `last` (`train_core.preference.process_reward`),
named `process_reward` among the reward functions' scores (`env.reward_weights` weighs it).

The PRM is an `RLTask.models` slot: the run opens its checkpoint before the first rollout, like
an opponent or a grader."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from kitchen.engine.config.sections import Section
from kitchen.families.common.process_reward import ProcessRewardHead, StepTokenizer, label_token_ids
from kitchen.families.common.settings import OtherModel
from train_core.preference.process_reward import (
    Aggregation,
    StepwiseExample,
    aggregate_steps,
    split_steps,
    step_probability,
)
from train_core.renderers.tokenizer import Tokenizer
from train_core.rl.model_slot import ModelSlot
from train_core.types import ModelInput

SCORE_NAME = "process_reward"
"""The score's name among the reward functions' (`env.reward_weights.process_reward`)."""


class ProcessRewardFn(Section):
    """Config section `env.process_reward`: the trained PRM that scores each reply step by step."""

    model: OtherModel = Field(..., description="the PRM: its checkpoint (a prm run directory) or model_name")
    aggregation: Aggregation = Field(
        "min", description="a reply's reward from its steps' P(correct): min, product or last"
    )
    prm: ProcessRewardHead = Field(
        default_factory=ProcessRewardHead, description="the PRM's step keys, as it was trained (its prm section)"
    )
    max_length: int | None = Field(1024, ge=2, description="tokens of prompt and reply read (its data.max_length)")


def prompt_text(prompt: Any) -> str:
    """The text the PRM reads as the prompt: a string prompt, or a chat prompt's last user message."""
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt if m.get("role") == "user"]
    content = users[-1]["content"] if users else ""
    return content if isinstance(content, str) else ""


class ProcessRewardScorer:
    """A per-sample reward function `(prompt, completion, record) -> reward` backed by a PRM in a
    model slot; `step_scores` gives the steps' P(correct)."""

    def __init__(self, slot: ModelSlot, tokenizer: Tokenizer, settings: ProcessRewardFn) -> None:
        self.slot, self.settings = slot, settings
        self.labels = label_token_ids(tokenizer, settings.prm.label_tokens)
        self.tokenize = StepTokenizer(tokenizer, settings.prm, settings.max_length)

    async def step_scores(self, prompt: Any, completion: str) -> list[float]:
        steps = split_steps(completion, self.settings.prm.step_separator)
        if not steps:
            return []
        input_ids, labels = self.tokenize(StepwiseExample(prompt_text(prompt), steps, [True] * len(steps)))
        ends = [i for i, label in enumerate(labels) if label >= 0]

        async def at(end: int) -> float:
            pos, neg = await asyncio.gather(
                *(self.slot.compute_logprobs(ModelInput.from_ints([*input_ids[: end + 1], t])) for t in self.labels)
            )
            return step_probability(float(pos[-1] or 0.0), float(neg[-1] or 0.0))

        return list(await asyncio.gather(*(at(end) for end in ends)))

    async def __call__(self, prompt: Any, completion: str, record: Mapping[str, Any]) -> float:
        return aggregate_steps(await self.step_scores(prompt, completion), self.settings.aggregation)


def process_reward_slot(settings: ProcessRewardFn) -> ModelSlot:
    """The slot the run opens the PRM into."""
    return ModelSlot(SCORE_NAME, settings.model.model_name, settings.model.checkpoint)
