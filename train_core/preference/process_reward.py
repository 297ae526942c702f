"""A process reward model (PRM): a label per reasoning step, as TRL's `PRMTrainer` trains one on
stepwise-supervision data (`prompt`, `completions` = the steps, `labels` = one bool per step,
the layout of trl-lib/math_shepherd).

Tokenisation follows TRL's `PRMTrainer.tokenize_row`: the prompt's tokens (no special tokens,
the BOS token prepended when the tokenizer has one), then each step's tokens followed by the
separator's; the label sits on the last token of each step-plus-separator, every other position
is ignored (-100). The prompt is cut from the left to `max_prompt_length`, the completion from
the right to `max_completion_length`, then the whole from the right to `max_length`; with
`train_on_last_step_only` only the last step keeps its label when training (evaluation keeps all).

TRL puts a two-class token-classification head on the model (logits `z_neg`, `z_pos` per token,
cross-entropy at the labelled positions). kitchen's backends train language models, so the PRM
is the LM itself read at those positions: the head's two rows are the unembedding rows of two
label tokens (`+` / `-` by default), and the two-class logit difference is
`log p(pos | prefix) - log p(neg | prefix)` (the softmax normaliser cancels). Each example is two
datums with the same input and weight only at the labelled positions, targets the correct label
token then the wrong one; the step's margin `log p(correct) - log p(wrong)` gives TRL's two-class
cross-entropy as `-log sigmoid(margin)` and the step is right when the margin is positive.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any, Literal

from train_core.errors import InvalidInputError
from train_core.types import Datum, ModelInput, TensorData

if TYPE_CHECKING:
    import torch

IGNORE = -100
"""The label of a position that is not a step's end (TRL's ignore index)."""

Aggregation = Literal["min", "product", "last"]
"""How a reply's step scores (P(step correct)) become one reward."""


@dataclass(frozen=True)
class StepwiseExample:
    """One stepwise-supervision record: the prompt, its reasoning steps, one label per step."""

    prompt: str
    completions: list[str]
    labels: list[bool]


def parse_stepwise(record: Mapping[str, Any]) -> StepwiseExample:
    """A record in math_shepherd's layout, or an InvalidInputError saying what is wrong (the
    caller adds the file and line)."""
    for key in ("prompt", "completions", "labels"):
        if key not in record:
            raise InvalidInputError(f"missing key {key!r} (stepwise records hold prompt, completions, labels)")
    prompt, steps, labels = record["prompt"], record["completions"], record["labels"]
    if not isinstance(prompt, str):
        raise InvalidInputError(f"'prompt' must be a string, got {type(prompt).__name__}")
    if not isinstance(steps, list) or not steps or not all(isinstance(step, str) for step in steps):
        raise InvalidInputError("'completions' must be a non-empty list of strings (the steps)")
    if not isinstance(labels, list) or not all(isinstance(label, bool) for label in labels):
        raise InvalidInputError("'labels' must be a list of booleans (one per step)")
    if len(labels) != len(steps):
        raise InvalidInputError(f"{len(steps)} steps but {len(labels)} labels")
    return StepwiseExample(prompt, list(steps), list(labels))


@dataclass(frozen=True)
class StepLimits:
    """TRL's `PRMConfig` lengths (None: no limit)."""

    max_length: int | None = 1024
    max_prompt_length: int | None = 512
    max_completion_length: int | None = None


def tokenize_stepwise(
    example: StepwiseExample,
    encode: Callable[[str], list[int]],
    bos_token_id: int | None,
    separator: str,
    limits: StepLimits,
    last_step_only: bool = False,
) -> tuple[list[int], list[int]]:
    """`(input_ids, labels)` as TRL's `tokenize_row`: labels 1 / 0 at each kept step's last token
    (its separator's last token), -100 elsewhere. `encode` tokenises without special tokens;
    `last_step_only` is TRL's `train_on_last_step_only` for training data."""
    prompt_ids = encode(example.prompt)
    separator_ids = encode(separator)
    steps = [encode(step) + separator_ids for step in example.completions]
    kept = [int(label) for label in example.labels]
    if last_step_only:
        kept = [IGNORE] * (len(kept) - 1) + kept[-1:]
    step_labels = [[IGNORE] * (len(step) - 1) + [label] for step, label in zip(steps, kept, strict=True)]
    completion_ids, labels = list(chain(*steps)), list(chain(*step_labels))
    if bos_token_id is not None:
        prompt_ids = [bos_token_id, *prompt_ids]
    if limits.max_prompt_length is not None:
        prompt_ids = prompt_ids[-limits.max_prompt_length :]  # as TRL slices: 0 keeps all (config: >= 1)
    if limits.max_completion_length is not None:
        completion_ids = completion_ids[: limits.max_completion_length]
        labels = labels[: limits.max_completion_length]
    input_ids = prompt_ids + completion_ids
    labels = [IGNORE] * len(prompt_ids) + labels
    if limits.max_length is not None:
        input_ids, labels = input_ids[: limits.max_length], labels[: limits.max_length]
    return input_ids, labels


def step_datums(input_ids: Sequence[int], labels: Sequence[int], label_tokens: tuple[int, int]) -> list[Datum]:
    """The example's two datums: input `input_ids`, weight 1 at each labelled position, whose
    target is the correct label token (`label_tokens` = (pos, neg)) in the first datum and the
    wrong one in the second; other targets are the next input token, weight 0. Empty when
    truncation left no label."""
    if len(input_ids) != len(labels):
        raise ValueError(f"{len(input_ids)} tokens but {len(labels)} labels")
    if all(label == IGNORE for label in labels):
        return []
    pos, neg = label_tokens
    weights = [0.0 if label == IGNORE else 1.0 for label in labels]
    following = [*input_ids[1:], input_ids[-1]]
    out = []
    for correct in (True, False):
        targets = [
            nxt if label == IGNORE else (pos if bool(label) == correct else neg)
            for nxt, label in zip(following, labels, strict=True)
        ]
        out.append(
            Datum(
                model_input=ModelInput.from_ints(list(input_ids)),
                loss_fn_inputs={
                    "target_tokens": TensorData.from_list(targets, "int64"),
                    "weights": TensorData.from_list(weights, "float32"),
                },
            )
        )
    return out


def step_margins(logprobs_D: Sequence[torch.Tensor], weights_D: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Per example, the margin `log p(correct) - log p(wrong)` at each labelled position, from
    `[correct, wrong]` datum pairs' per-token logprobs (gradients kept)."""
    if len(logprobs_D) % 2 or len(logprobs_D) != len(weights_D):
        raise ValueError(f"step datums come in (correct, wrong) pairs, got {len(logprobs_D)} / {len(weights_D)}")
    margins = []
    for i in range(0, len(logprobs_D), 2):
        where = weights_D[i] > 0
        margins.append(logprobs_D[i][where] - logprobs_D[i + 1][where])
    return margins


def process_reward_loss(margins_E: Sequence[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    """TRL's two-class cross-entropy, mean over every labelled step of the batch:
    `-log sigmoid(margin)`; with `process_reward_metrics` of the margins."""
    import torch
    import torch.nn.functional as F

    margins = torch.cat(list(margins_E)) if margins_E else torch.zeros(0)
    if margins.numel() == 0:
        raise ValueError("process_reward_loss: no labelled step in the batch")
    loss = -F.logsigmoid(margins).mean()
    return loss, {"prm_loss": loss.item(), **process_reward_metrics([m.detach() for m in margins_E])}


def process_reward_metrics(margins_E: Sequence[torch.Tensor]) -> dict[str, float]:
    """`step_accuracy`: share of labelled steps whose correct label is the likelier (margin > 0);
    `trajectory_accuracy`: share of examples with every labelled step right; counts of both."""
    steps = sum(int(m.numel()) for m in margins_E)
    if steps == 0:
        raise ValueError("no labelled step to measure")
    right = sum(int((m > 0).sum()) for m in margins_E)
    labelled = [m for m in margins_E if m.numel()]
    return {
        "step_accuracy": right / steps,
        "trajectory_accuracy": sum(bool((m > 0).all()) for m in labelled) / len(labelled),
        "num_steps": float(steps),
        "num_trajectories": float(len(labelled)),
    }


def step_probability(logprob_pos: float, logprob_neg: float) -> float:
    """P(step correct) under the two-class head: `sigmoid(log p(pos) - log p(neg))`."""
    margin = logprob_pos - logprob_neg
    return 1.0 / (1.0 + math.exp(-margin)) if margin >= 0 else math.exp(margin) / (1.0 + math.exp(margin))


def aggregate_steps(probabilities: Sequence[float], how: Aggregation) -> float:
    """A reply's reward from its steps' P(correct): the weakest step (`min`), the chance that all
    are right (`product`), or the last step's (`last`); 0 for a reply with no step."""
    if not probabilities:
        return 0.0
    if how == "min":
        return min(probabilities)
    if how == "product":
        return math.prod(probabilities)
    if how == "last":
        return probabilities[-1]
    raise ValueError(f"unknown aggregation {how!r} (min, product or last)")


def split_steps(text: str, separator: str) -> list[str]:
    """A reply's steps: its text split on the separator, blank pieces dropped."""
    return [piece.strip() for piece in text.split(separator) if piece.strip()]
