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
    PreferenceObjective,
    objective_loss,
    pair_metrics,
    rounding_resolution,
    wpo_weights,
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

    Gradients flow through `logprobs_D`; the weights are constants. Sums are taken in float32
    (float64 for float64 logprobs).
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
        dtype = _sum_dtype(logprobs_T)
        sums.append((logprobs_T.to(dtype) * weights_T.to(dtype)).sum())
    return torch.stack(sums)


def weights_and_refs(
    data: Sequence[Datum], logprobs_D: Sequence[torch.Tensor], ref_D: Sequence[torch.Tensor]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Inside a custom loss: each datum's loss weights and its frozen reference logprobs, moved to
    the device of the policy logprobs the backend handed over for it."""
    devices_D = [lp.device for lp in logprobs_D]
    weights_D = [d.loss_fn_inputs["weights"].to_torch().to(dev) for d, dev in zip(data, devices_D, strict=True)]
    refs_D = [ref.to(dev) for ref, dev in zip(ref_D, devices_D, strict=True)]
    return weights_D, refs_D


def _sum_dtype(logprobs_T: torch.Tensor) -> torch.dtype:
    import torch

    return torch.promote_types(logprobs_T.dtype, torch.float32)


def pair_sequence_logprobs(
    logprobs_D: Sequence[torch.Tensor], weights_D: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token logprobs of interleaved datums -> (chosen_P, rejected_P) sequence logprobs."""
    if len(logprobs_D) == 0 or len(logprobs_D) % 2:
        raise ValueError(f"interleaved chosen/rejected data need an even, non-zero count, got {len(logprobs_D)}")
    sequence_logprobs_D = sequence_logprobs(logprobs_D, weights_D)
    return sequence_logprobs_D[0::2], sequence_logprobs_D[1::2]


def ld_sequence_logprobs(
    logprobs_D: Sequence[torch.Tensor], weights_D: Sequence[torch.Tensor], ld_alpha: float
) -> torch.Tensor:
    """LD-DPO's sequence logprobs of interleaved `[c0, r0, ...]` datums (Liu et al. 2024,
    arXiv:2409.06411, as TRL's `ld_alpha` computes them): of each pair, the first `min(nc, nr)`
    completion tokens of both completions count fully and the longer one's remaining tokens
    count `ld_alpha` times, so a verbose completion's extra tokens weigh less. `ld_alpha = 1` is
    the plain sum."""
    import torch

    chosen_D = [(w > 0) for w in weights_D[0::2]]
    rejected_D = [(w > 0) for w in weights_D[1::2]]
    sums = []
    for index, (logprobs_T, weights_T) in enumerate(zip(logprobs_D, weights_D, strict=True)):
        pair = index // 2
        shared = min(int(chosen_D[pair].sum()), int(rejected_D[pair].sum()))
        position_T = (weights_T > 0).long().cumsum(0)
        dtype = _sum_dtype(logprobs_T)
        factor_T = torch.where(position_T <= shared, 1.0, ld_alpha).to(dtype)
        sums.append((logprobs_T.to(dtype) * weights_T.to(dtype) * factor_T).sum())
    return torch.stack(sums)


def make_dpo_custom_loss(
    ref_logprobs_D: Sequence[torch.Tensor],
    objective: PreferenceObjective,
    ld_alpha: float | None = None,
) -> DpoCustomLossFn:
    """The custom loss for `forward_backward_custom` on one interleaved batch.

    `ref_logprobs_D` holds the frozen reference model's logprobs of each datum's target tokens,
    in the same order as the data (`compute_logprobs` of `train_core.rl.kl_penalty.logprob_input(
    datum)`, through `target_logprobs`); zeros are the reference-free mode. The returned metrics
    add `num_tokens` (completion tokens). `objective` names the losses and their parameters
    (`train_core.preference.losses`); `ld_alpha` weighs the policy's and the reference's
    sequence logprobs as LD-DPO does (`ld_sequence_logprobs`). With `objective.use_weighting`
    (WPO) the loss also takes `log_sum_sq_probs_D=`, each target position's `log sum_v p_v^2`
    under the policy, which the local backend computes in the same forward pass and hands to a
    custom loss with that parameter.
    """
    import torch

    ref_D = [ref.detach() for ref in ref_logprobs_D]

    def pairs(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[PairBatch, list[torch.Tensor]]:
        if not len(data) == len(logprobs_D) == len(ref_D):
            raise ValueError(
                f"{len(data)} data, {len(logprobs_D)} logprob tensors, {len(ref_D)} reference logprob tensors"
            )
        weights_D, refs_D = weights_and_refs(data, logprobs_D, ref_D)
        chosen_P, rejected_P = pair_sequence_logprobs(logprobs_D, weights_D)
        chosen_ref_P, rejected_ref_P = pair_sequence_logprobs(refs_D, weights_D)
        chosen_plain_P = None
        if ld_alpha is not None:
            chosen_plain_P = chosen_P
            policy_D = ld_sequence_logprobs(logprobs_D, weights_D, ld_alpha)
            reference_D = ld_sequence_logprobs(refs_D, weights_D, ld_alpha)
            chosen_P, rejected_P = policy_D[0::2], policy_D[1::2]
            chosen_ref_P, rejected_ref_P = reference_D[0::2], reference_D[1::2]
        lengths_D = torch.stack([(w > 0).float().sum() for w in weights_D])
        batch = PairBatch(
            chosen_P, rejected_P, chosen_ref_P, rejected_ref_P, lengths_D[0::2], lengths_D[1::2], chosen_plain_P
        )
        return batch, weights_D

    def finish(batch: PairBatch, weights_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        loss = objective_loss(objective, batch)
        resolution_P = rounding_resolution(batch.chosen, batch.rejected, batch.chosen_ref, batch.rejected_ref)
        metrics = pair_metrics(
            loss, batch.chosen_logratio, batch.rejected_logratio, objective.params.beta, resolution_P
        )
        metrics["num_tokens"] = float(sum(w.sum().item() for w in weights_D))
        return loss, metrics

    if objective.use_weighting:

        def weighted_dpo_loss(
            data: Sequence[Datum],
            logprobs_D: list[torch.Tensor],
            log_sum_sq_probs_D: list[torch.Tensor] | None = None,
        ) -> tuple[torch.Tensor, dict[str, float]]:
            if log_sum_sq_probs_D is None:
                raise ValueError(
                    "dpo.use_weighting (WPO) needs each token's log sum_v p_v^2 under the policy "
                    "(log_sum_sq_probs_D), which this backend does not hand a custom loss; the local backend does"
                )
            batch, weights_D = pairs(data, logprobs_D)
            wpo_P = wpo_weights(logprobs_D, log_sum_sq_probs_D, weights_D)
            return finish(dataclasses.replace(batch, weights=wpo_P), weights_D)

        return weighted_dpo_loss

    def dpo_custom_loss(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        return finish(*pairs(data, logprobs_D))

    return dpo_custom_loss
