"""KL penalty against a reference (base) model, folded into the advantages.

Pure: the stage computes the reference logprobs (`SamplingClient.compute_logprobs` on
`logprob_input(datum)`) and hands them in; this module only does the arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from train_core.types import Datum, ModelInput, TensorData

if TYPE_CHECKING:
    import torch


def logprob_input(datum: Datum) -> ModelInput:
    """The full token sequence of a datum (inputs plus the last target), to score with a model."""
    targets = datum.loss_fn_inputs["target_tokens"].tolist()
    if not targets:
        raise ValueError("a datum without target tokens has nothing to score")
    return datum.model_input.append_int(int(targets[-1]))


def target_logprobs(prompt_logprobs: Sequence[float | None]) -> torch.Tensor:
    """Per-target logprobs from `compute_logprobs` output, whose first entry (no context) is None."""
    import torch

    rest = list(prompt_logprobs[1:])
    if any(lp is None for lp in rest):
        raise ValueError("compute_logprobs returned None past the first token")
    return torch.tensor([float(lp) for lp in rest if lp is not None], dtype=torch.float32)


def discounted_future_sum(x_T: torch.Tensor, gamma: float) -> torch.Tensor:
    """`r_t = x_t + gamma * r_{t+1}` (with r past the end = 0), so each token pays for what follows."""
    import torch

    out_T = torch.empty_like(x_T)
    running = torch.zeros((), dtype=x_T.dtype)
    for t in range(x_T.shape[0] - 1, -1, -1):
        running = x_T[t] + gamma * running
        out_T[t] = running
    return out_T


def incorporate_kl_penalty(
    data_D: Sequence[Datum],
    base_logprobs_D: Sequence[torch.Tensor],
    coef: float,
    discount: float = 0.0,
) -> tuple[list[Datum], dict[str, float]]:
    """New datums whose advantages include `coef * mask * (avg - d_t)`, `d_t = lp_sampled - lp_base`.

    `avg` is the mean of `d` over all action tokens of the batch, so the penalty is centred: tokens
    that drifted further from the base than average are pushed back, the rest pulled forward.
    With `discount > 0` the per-token penalty is first turned into its discounted future sum
    (over all tokens of the datum, then restricted to action tokens).
    `base_logprobs_D` are per target token (see `target_logprobs`); data must still hold the mask.
    """
    masks_D = [d.loss_fn_inputs["mask"].to_torch().float() for d in data_D]
    diffs_D = []
    for i, (datum, base_T, mask_T) in enumerate(zip(data_D, base_logprobs_D, masks_D, strict=True)):
        sampled_T = datum.loss_fn_inputs["logprobs"].to_torch().float()
        if base_T.shape != sampled_T.shape:
            raise ValueError(f"datum {i}: {tuple(base_T.shape)} base logprobs for {tuple(sampled_T.shape)} targets")
        diffs_D.append((sampled_T - base_T.float()) * mask_T)
    n_action_tokens = sum(float(m.sum()) for m in masks_D)
    if n_action_tokens == 0:
        raise ValueError("incorporate_kl_penalty: the batch has no action tokens (mask > 0)")
    avg = sum(float(d.sum()) for d in diffs_D) / n_action_tokens

    new_data_D = []
    for datum, diff_T, mask_T in zip(data_D, diffs_D, masks_D, strict=True):
        penalty_T = coef * mask_T * (avg - diff_T)
        if discount > 0:
            # Masked again: discounting spreads the penalty onto the observation tokens before
            # an action, which the policy did not choose and must not be trained on.
            penalty_T = discounted_future_sum(penalty_T, discount) * mask_T
        advantages_T = datum.loss_fn_inputs["advantages"].to_torch().float() + penalty_T
        inputs = {**datum.loss_fn_inputs, "advantages": TensorData.from_torch(advantages_T)}
        new_data_D.append(Datum(datum.model_input, inputs))
    return new_data_D, {"kl_policy_base": avg}
