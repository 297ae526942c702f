"""Loss aggregation: how per-token losses of a batch become one number (verl's `loss_agg_mode`).

With `L` the per-token loss and `m` the action mask of B sequences (a sequence here is a datum):

    token_sum                 sum(L m)                            Tinker's losses, kitchen's default
    token_mean                sum(L m) / sum(m)                   DAPO
    seq_mean_token_sum        mean_b sum_t L m                    sequence as one action (RLOO)
    seq_mean_token_mean       mean_b (sum_t L m / sum_t m)        original GRPO
    seq_mean_token_sum_norm   sum(L m) / (B * norm_tokens)        Dr. GRPO (a constant normaliser)

`mean_b` and B count the sequences with at least one action token (verl leaves fully masked
sequences out). Each mode is a per-token scale factor `w` with `aggregate = sum(w L)`, which is
how it runs on a backend whose losses are sums over tokens (Tinker's): the factors multiply the
input that scales each token's loss linearly (the advantages, or cross-entropy's weights; see
`LossSpec.scaled_by`), so a built-in loss on the folded datums computes the aggregated loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, get_args

from train_core.errors import InvalidInputError
from train_core.losses import get_loss_fn
from train_core.types import Datum, TensorData

if TYPE_CHECKING:
    import torch

AggregationMode = Literal[
    "token_sum", "token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm"
]
AGGREGATION_MODES: tuple[AggregationMode, ...] = get_args(AggregationMode)


def _check(mode: str, norm_tokens: float | None) -> None:
    if mode not in AGGREGATION_MODES:
        raise InvalidInputError(f"unknown loss aggregation {mode!r}; known: {list(AGGREGATION_MODES)}")
    if mode == "seq_mean_token_sum_norm" and (norm_tokens is None or norm_tokens <= 0):
        raise InvalidInputError(f"seq_mean_token_sum_norm needs a positive constant norm_tokens, got {norm_tokens}")


def token_scales(masks_D: Sequence[torch.Tensor], mode: str, norm_tokens: float | None = None) -> list[torch.Tensor]:
    """Per datum, the factor each token's loss is multiplied by under `mode` (0 off the mask).

    The factors depend on the whole batch (token and sequence counts), so they must be computed
    over exactly the datums of one optimizer step.
    """
    _check(mode, norm_tokens)
    floats_D = [mask_T.double() for mask_T in masks_D]
    tokens_D = [float(mask_T.sum()) for mask_T in floats_D]
    sequences = sum(1 for n in tokens_D if n > 0)
    if mode == "token_sum":
        return floats_D
    if mode == "token_mean":
        return [mask_T / max(sum(tokens_D), 1.0) for mask_T in floats_D]
    if mode == "seq_mean_token_sum":
        return [mask_T / max(sequences, 1) for mask_T in floats_D]
    if mode == "seq_mean_token_mean":
        return [mask_T / (max(n, 1.0) * max(sequences, 1)) for mask_T, n in zip(floats_D, tokens_D, strict=True)]
    assert norm_tokens is not None  # checked above
    return [mask_T / (max(sequences, 1) * norm_tokens) for mask_T in floats_D]


def aggregate_loss(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, mode: str, norm_tokens: float | None = None
) -> torch.Tensor:
    """The batch's loss under `mode` from per-token losses and the action mask, both [B, T]."""
    if loss_BT.shape != mask_BT.shape or loss_BT.dim() != 2:
        raise InvalidInputError(
            f"aggregate_loss needs [B, T] loss and mask, got {tuple(loss_BT.shape)} and {tuple(mask_BT.shape)}"
        )
    import torch

    scales_BT = torch.stack(token_scales(list(mask_BT), mode, norm_tokens)).to(loss_BT.dtype)
    # where, not a product: a token off the mask contributes nothing, even a NaN/inf loss there.
    return torch.where(scales_BT != 0, loss_BT * scales_BT, torch.zeros_like(loss_BT)).sum()


def fold_aggregation(
    data_D: Sequence[Datum], loss_fn: str, mode: str, norm_tokens: float | None = None, weight: float = 1.0
) -> list[Datum]:
    """The datums with `mode`'s token factors (times `weight`) multiplied into the input that
    scales `loss_fn` token by token, so the built-in (summing) loss computes the aggregated loss.

    The datums must still hold their `mask`. `token_sum` with weight 1 changes nothing. A loss with
    no such input (dro, whose drift term does not scale with the advantage) is an InvalidInputError.
    """
    _check(mode, norm_tokens)
    if mode == "token_sum" and weight == 1.0:
        return list(data_D)
    key = get_loss_fn(loss_fn).scaled_by
    if key is None:
        raise InvalidInputError(
            f"loss {loss_fn!r} has no input that scales each token's loss, so loss aggregation {mode!r} "
            "cannot be folded into its datums; use token_sum or another loss"
        )
    masks_D = [datum.loss_fn_inputs["mask"].to_torch() for datum in data_D]
    folded_D = []
    for datum, scale_T in zip(data_D, token_scales(masks_D, mode, norm_tokens), strict=True):
        scaled_T = datum.loss_fn_inputs[key].to_torch().double() * scale_T * weight
        folded_D.append(
            Datum(datum.model_input, {**datum.loss_fn_inputs, key: TensorData.from_torch(scaled_T.float())})
        )
    return folded_D
