"""Cross-entropy over K targets per position (`target_tokens` and `weights` of shape [T, K]): the
loss of top-K distillation, `-sum(weights * logprobs)` over every (position, candidate) cell.

The backends score one target per position, so a [T, K] datum runs as K datums over the same
input, candidate k's column each; their losses and gradients add up to the [T, K] loss's, and
their `logprobs` come back as the [T, K] grid (`Expanded.regroup`). The backends share the work
of equal inputs (the local backend runs a prefix once), so the K copies cost about one forward of
the body and K of the output head. A cell whose target is negative (a padded candidate) must
have weight 0; it is scored as token 0 and reported as NaN. Used by kitchen serve (the Tinker
SDK's 2-D targets) and by self-distillation (the teacher's top-K as soft targets).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from train_core.errors import InvalidInputError
from train_core.types import Datum, ForwardBackwardOutput, TensorData

if TYPE_CHECKING:  # imported where used: recipes import this module through SDFT without torch
    import torch

TARGETS, WEIGHTS = "target_tokens", "weights"


@dataclass(frozen=True)
class Expanded:
    """The datums to run, and how each asked-for datum maps onto them."""

    data: list[Datum]
    spans: list[tuple[int, int, bool]]
    """Per original datum: (first expanded datum, how many, whether it was [T, K])."""
    padded: list[torch.Tensor | None]
    """Per original [T, K] datum: where its targets were negative (reported as NaN)."""

    def regroup(self, output: ForwardBackwardOutput) -> ForwardBackwardOutput:
        """The outputs of the original datums: a [T, K] datum's fields stacked into [T, K]."""
        import torch

        rows: list[dict[str, TensorData]] = []
        for (first, count, grid), padded in zip(self.spans, self.padded, strict=True):
            parts = output.loss_fn_outputs[first : first + count]
            if not grid:
                rows.append(parts[0])
                continue
            merged = {}
            for name in parts[0]:
                stacked = torch.stack([part[name].to_torch().reshape(-1) for part in parts], dim=-1)
                if padded is not None and stacked.is_floating_point():
                    stacked = stacked.masked_fill(padded, float("nan"))
                merged[name] = TensorData.from_torch(stacked)
            rows.append(merged)
        return ForwardBackwardOutput(rows, output.metrics)


def expand_2d_targets(data: list[Datum], loss_fn: str) -> Expanded | None:
    """`data` with every [T, K] cross-entropy datum split into K; None when none is [T, K]. A grid
    under another loss, or one whose weights do not match it, is an InvalidInputError."""

    if not any(len(d.loss_fn_inputs[TARGETS].shape) == 2 for d in data if TARGETS in d.loss_fn_inputs):
        return None
    if loss_fn != "cross_entropy":
        raise InvalidInputError(f"loss_fn {loss_fn!r}: [T, K] target_tokens are served for cross_entropy only")
    expanded: list[Datum] = []
    spans: list[tuple[int, int, bool]] = []
    padded: list[torch.Tensor | None] = []
    for index, datum in enumerate(data):
        targets = datum.loss_fn_inputs[TARGETS]
        if len(targets.shape) != 2:
            spans.append((len(expanded), 1, False))
            padded.append(None)
            expanded.append(datum)
            continue
        targets_TK = targets.to_torch().long()
        weights = datum.loss_fn_inputs.get(WEIGHTS)
        if weights is None or tuple(weights.shape) != tuple(targets.shape):
            raise InvalidInputError(
                f"datum {index}: [T, K] target_tokens {list(targets.shape)} need weights of the same shape, "
                f"got {None if weights is None else list(weights.shape)}"
            )
        weights_TK = weights.to_torch().float()
        negative_TK = targets_TK < 0
        if bool((negative_TK & (weights_TK != 0)).any()):
            raise InvalidInputError(f"datum {index}: a negative target token (a padded candidate) must have weight 0")
        targets_TK = targets_TK.clamp(min=0)
        spans.append((len(expanded), targets_TK.shape[1], True))
        padded.append(negative_TK if bool(negative_TK.any()) else None)
        for k in range(targets_TK.shape[1]):
            inputs = {
                TARGETS: TensorData.from_torch(targets_TK[:, k]),
                WEIGHTS: TensorData.from_torch(weights_TK[:, k]),
            }
            expanded.append(Datum(datum.model_input, inputs))
    return Expanded(expanded, spans, padded)
