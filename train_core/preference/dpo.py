"""The DPO loss on sequence logprobs, and the custom loss that feeds it from per-token logprobs.

Data arrive interleaved `[chosen_0, rejected_0, chosen_1, rejected_1, ...]` (see `datums.py`). A
sequence logprob is `sum(token_logprob * weight)`, so only completion tokens count. With
`c = lp_chosen - ref_chosen` and `r = lp_rejected - ref_rejected`, the loss is
`mean(-logsigmoid(beta * (c - r)))`: exactly ln 2 while the policy equals the reference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from train_core.preference.losses import (
    PairBatch,
    PreferenceLossParams,
    pair_metrics,
    preference_loss,
    rounding_resolution,
)
from train_core.types import Datum

if TYPE_CHECKING:
    import torch

# The shape of `kitchen.engine.ports.CustomLossFn`, restated so train_core does not import kitchen.
DpoCustomLossFn = Callable[[Sequence[Datum], list["torch.Tensor"]], tuple["torch.Tensor", dict[str, float]]]


def dpo_loss(
    chosen_logprobs_P: torch.Tensor,
    rejected_logprobs_P: torch.Tensor,
    chosen_ref_logprobs_P: torch.Tensor,
    rejected_ref_logprobs_P: torch.Tensor,
    beta: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO loss over P pairs of sequence logprobs, with its metrics.

    Metrics: `dpo_loss`, `accuracy = mean(c - r > rounding)` (`pair_metrics`), `margin = mean(beta*c - beta*r)`,
    `chosen_reward = mean(beta*c)`, `rejected_reward = mean(beta*r)`, `num_pairs`.
    """
    import torch.nn.functional as F

    shapes = {t.shape for t in (chosen_logprobs_P, rejected_logprobs_P, chosen_ref_logprobs_P, rejected_ref_logprobs_P)}
    if len(shapes) != 1 or chosen_logprobs_P.dim() != 1:
        raise ValueError(f"dpo_loss wants four 1-D tensors of one shape, got shapes {sorted(shapes)}")
    if chosen_logprobs_P.numel() == 0:
        raise ValueError("dpo_loss needs at least one pair")
    chosen_logratio_P = chosen_logprobs_P - chosen_ref_logprobs_P
    rejected_logratio_P = rejected_logprobs_P - rejected_ref_logprobs_P
    loss = -F.logsigmoid(beta * chosen_logratio_P - beta * rejected_logratio_P).mean()
    resolution_P = rounding_resolution(
        chosen_logprobs_P, rejected_logprobs_P, chosen_ref_logprobs_P, rejected_ref_logprobs_P
    )
    return loss, pair_metrics(loss, chosen_logratio_P, rejected_logratio_P, beta, resolution_P)


def sequence_logprobs(logprobs_D: Sequence[torch.Tensor], weights_D: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-token logprobs of D datums -> their D sequence logprobs `sum(logprob * weight)`.

    Gradients flow through `logprobs_D`; the weights are constants. Sums are taken in float32.
    """
    import torch

    if len(logprobs_D) != len(weights_D):
        raise ValueError(f"{len(logprobs_D)} logprob tensors but {len(weights_D)} weight tensors")
    sums = []
    for i, (logprobs_T, weights_T) in enumerate(zip(logprobs_D, weights_D, strict=True)):
        if logprobs_T.shape != weights_T.shape:
            raise ValueError(
                f"datum {i}: logprobs shape {tuple(logprobs_T.shape)} != weights shape {tuple(weights_T.shape)}"
            )
        sums.append((logprobs_T.float() * weights_T.float()).sum())
    return torch.stack(sums)


def pair_sequence_logprobs(
    logprobs_D: Sequence[torch.Tensor], weights_D: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token logprobs of interleaved datums -> (chosen_P, rejected_P) sequence logprobs."""
    if len(logprobs_D) == 0 or len(logprobs_D) % 2:
        raise ValueError(f"interleaved chosen/rejected data need an even, non-zero count, got {len(logprobs_D)}")
    sequence_logprobs_D = sequence_logprobs(logprobs_D, weights_D)
    return sequence_logprobs_D[0::2], sequence_logprobs_D[1::2]


def make_dpo_custom_loss(
    ref_logprobs_D: Sequence[torch.Tensor],
    beta: float,
    loss_type: str = "sigmoid",
    params: PreferenceLossParams | None = None,
) -> DpoCustomLossFn:
    """The custom loss for `forward_backward_custom` on one interleaved batch.

    `ref_logprobs_D` holds the frozen reference model's logprobs of each datum's target tokens,
    in the same order as the data (`compute_logprobs` of `train_core.rl.kl_penalty.logprob_input(
    datum)`, through `target_logprobs`). The returned metrics add `num_tokens` (completion tokens).
    `loss_type` picks a loss of `train_core.preference.losses` (`sigmoid` is DPO); `params` holds
    its other parameters (its `beta` is replaced by `beta`).
    """
    import torch

    ref_D = [ref.detach() for ref in ref_logprobs_D]
    loss_params = dataclasses.replace(params or PreferenceLossParams(), beta=beta)

    def dpo_custom_loss(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        if not len(data) == len(logprobs_D) == len(ref_D):
            raise ValueError(
                f"{len(data)} data, {len(logprobs_D)} logprob tensors, {len(ref_D)} reference logprob tensors"
            )
        devices_D = [lp.device for lp in logprobs_D]
        weights_D = [d.loss_fn_inputs["weights"].to_torch().to(dev) for d, dev in zip(data, devices_D, strict=True)]
        chosen_P, rejected_P = pair_sequence_logprobs(logprobs_D, weights_D)
        chosen_ref_P, rejected_ref_P = pair_sequence_logprobs(
            [ref.to(dev) for ref, dev in zip(ref_D, devices_D, strict=True)], weights_D
        )
        if loss_type == "sigmoid":
            loss, metrics = dpo_loss(chosen_P, rejected_P, chosen_ref_P, rejected_ref_P, beta)
        else:
            lengths_D = torch.stack([w.float().sum().clamp(min=1.0) for w in weights_D])
            pairs = PairBatch(chosen_P, rejected_P, chosen_ref_P, rejected_ref_P, lengths_D[0::2], lengths_D[1::2])
            loss, metrics = preference_loss(loss_type, pairs, loss_params)
        metrics["num_tokens"] = float(sum(w.sum().item() for w in weights_D))
        return loss, metrics

    return dpo_custom_loss
