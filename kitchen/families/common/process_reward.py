"""What training a process reward model and scoring with one share: the `prm` section (TRL's
`PRMConfig` step keys and the two label tokens) and TRL's `tokenize_row` on a kitchen tokenizer,
so a PRM reads RL replies exactly as it read its training data
(`train_core.preference.process_reward`)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field, model_validator

from kitchen.engine.config.sections import Section
from kitchen.families.common.setup import single_token_ids
from train_core.preference.process_reward import StepLimits, StepwiseExample, tokenize_stepwise
from train_core.renderers.tokenizer import Tokenizer

LABEL_TOKENS = ("+", "-")
"""The default label tokens (`prm.label_tokens`): the step is right / wrong."""


class ProcessRewardHead(Section):
    """Config section `prm`: TRL's `PRMConfig` keys beyond the data section's (`data.max_length`
    is its `max_length`) and the two label tokens that stand in for its two-class head."""

    step_separator: str = Field("\n", min_length=1, description="TRL's step_separator: appended to every step")
    train_on_last_step_only: bool = Field(False, description="TRL's: train on the last step's label only")
    max_prompt_length: int | None = Field(512, ge=1, description="prompt tokens kept (cut from the left)")
    max_completion_length: int | None = Field(
        None, ge=1, description="step tokens kept (cut from the right); none = all"
    )
    label_tokens: tuple[str, str] = Field(
        LABEL_TOKENS, description="two single-token strings: the step is right, the step is wrong"
    )

    @model_validator(mode="after")
    def _two_label_tokens(self) -> ProcessRewardHead:
        if self.label_tokens[0] == self.label_tokens[1]:
            raise ValueError("label_tokens: the two label tokens must differ")
        return self


def label_token_ids(tokenizer: Tokenizer, texts: Sequence[str]) -> tuple[int, int]:
    """The ids of the two label tokens; each must encode to exactly one token."""
    return single_token_ids(tokenizer, texts, "prm.label_tokens")


class StepTokenizer:
    """TRL's `tokenize_row` with a kitchen tokenizer and the config's limits."""

    def __init__(self, tokenizer: Tokenizer, head: ProcessRewardHead, max_length: int | None) -> None:
        self.tokenizer = tokenizer
        self.bos = getattr(tokenizer, "bos_token_id", None)
        self.head = head
        self.limits = StepLimits(max_length, head.max_prompt_length, head.max_completion_length)

    def __call__(self, example: StepwiseExample, last_step_only: bool = False) -> tuple[list[int], list[int]]:
        return tokenize_stepwise(
            example,
            lambda text: self.tokenizer.encode(text, add_special_tokens=False),
            self.bos,
            self.head.step_separator,
            self.limits,
            last_step_only,
        )
