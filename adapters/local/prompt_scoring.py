"""`compute_logprobs` requests, scored many at a time in one right-padded forward pass."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from adapters.common.training_batch import right_pad
from adapters.local.forward_pass import target_logprobs


@dataclass(frozen=True)
class ScoreRequest:
    """The tokens of one `compute_logprobs` call (at least two: a lone token has nothing to score)."""

    tokens: list[int]

    @property
    def key(self) -> Hashable:
        """Any two scoring requests may share a batch."""
        return None

    @property
    def rows(self) -> int:
        return 1

    @property
    def length(self) -> int:
        return len(self.tokens)


@torch.no_grad()
def score_prompts(model: torch.nn.Module, requests_B: Sequence[ScoreRequest], pad_id: int) -> list[list[float | None]]:
    """Each request's token logprobs given the tokens before them (None for the first).

    Right padding needs no mask (see `right_pad`), so every row gets what it would get alone.
    """
    device = next(model.parameters()).device
    inputs_BL = right_pad([r.tokens[:-1] for r in requests_B], pad_id, device)
    targets_BL = right_pad([r.tokens[1:] for r in requests_B], pad_id, device)
    logprobs_BL = target_logprobs(model, inputs_BL, targets_BL).tolist()
    return [[None, *row[: r.length - 1]] for r, row in zip(requests_B, logprobs_BL, strict=True)]
