"""Training only on the high-entropy "forking" tokens (Wang et al. 2025, "Beyond the 80/20 Rule",
arXiv:2506.01939), as TRL 1.16's `GRPOConfig.top_entropy_quantile` (rho) computes it
(`GRPOTrainer.get_high_entropy_mask`):

the threshold is `torch.quantile` (linear interpolation) at `1 - rho` of the entropies of every
action token in the batch (all of the loss call's sequences; TRL gathers them over its
processes); a token is kept when it is an action token and its entropy is at or above the
threshold, so ties at the threshold are all kept. rho = 1 keeps every token (TRL then builds no
mask), rho = 0 only the tokens at the batch's maximum; no action token keeps nothing. The mask
is a constant (no gradient through the entropies).

One difference: TRL takes the quantile in float32 whatever the entropies' dtype, so on float64
entropies its threshold can round above the batch's maximum and rho = 0 keeps no token. kitchen
takes it in the entropies' dtype (float32 for bfloat16 ones, which `torch.quantile` does not
take): on float32 entropies, what the local backend computes, the two are the same bit for bit.

TRL multiplies the per-token *policy* loss by the mask before adding the KL term (so the KL
covers every action token) and restricts the entropy bonus to the kept tokens; the loss keeps
its normaliser (the kept tokens are not re-averaged). `PolicyObjective` does the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def check_quantile(rho: float) -> None:
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"top_entropy_quantile must be in [0, 1], got {rho}")


def high_entropy_mask(
    entropy_D: Sequence[torch.Tensor], masks_D: Sequence[torch.Tensor], rho: float
) -> list[torch.Tensor]:
    """Per sequence, a bool mask of its action tokens (`masks_D` > 0) whose entropy is in the
    batch's top `rho` quantile (the module doc)."""
    import torch

    check_quantile(rho)
    action_D = [mask_T > 0 for mask_T in masks_D]
    with torch.no_grad():
        values = [entropy_T.detach()[action_T] for entropy_T, action_T in zip(entropy_D, action_D, strict=True)]
        pooled = torch.cat(values) if values else torch.zeros(0)
        if pooled.dtype not in (torch.float32, torch.float64):
            pooled = pooled.float()
        if pooled.numel() == 0:
            return [torch.zeros_like(action_T) for action_T in action_D]
        threshold = torch.quantile(pooled, 1.0 - rho)
        return [
            (entropy_T.detach() * action_T >= threshold) & action_T
            for entropy_T, action_T in zip(entropy_D, action_D, strict=True)
        ]
