"""`compute_logprobs` requests, scored many at a time in one forward pass."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from adapters.local.forward_pass import sequence_logprobs
from adapters.local.token_scoring import LogprobMethod
from adapters.local.vision import vision_logprobs
from train_core.types import ImageChunk


@dataclass(frozen=True)
class ScoreRequest:
    """The tokens of one `compute_logprobs` call (at least two: a lone token has nothing to score)."""

    tokens: list[int]
    images: tuple[ImageChunk, ...] = ()
    """The prompt's images (a vision-language model); their positions in `tokens` hold its image token."""

    @property
    def key(self) -> Hashable:
        """Any two scoring requests without images may share a batch; those with images too."""
        return bool(self.images)

    @property
    def rows(self) -> int:
        return 1

    @property
    def length(self) -> int:
        return len(self.tokens)


@torch.no_grad()
def score_prompts(
    model: torch.nn.Module, requests_B: Sequence[ScoreRequest], pad_id: int, method: LogprobMethod = "chunked"
) -> list[list[float | None]]:
    """Each request's token logprobs given the tokens before them (None for the first); every
    request gets what it would get alone (see `sequence_logprobs`)."""
    inputs_D, targets_D = [r.tokens[:-1] for r in requests_B], [r.tokens[1:] for r in requests_B]
    if requests_B[0].images:
        images = [image for r in requests_B for image in r.images]
        logprobs_D = vision_logprobs(model, inputs_D, targets_D, images, pad_id)[0]
    else:
        logprobs_D = sequence_logprobs(model, inputs_D, targets_D, pad_id, method).logprobs_D
    return [[None, *logprobs.tolist()] for logprobs in logprobs_D]
