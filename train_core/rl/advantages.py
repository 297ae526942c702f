"""Group-relative advantages (GRPO): each trajectory is scored against its own group's mean."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from train_core.rl.types import TrajectoryGroup

if TYPE_CHECKING:
    import torch


def compute_advantages(
    groups_P: Sequence[TrajectoryGroup], normalize_std: bool = False, eps: float = 1e-6
) -> list[torch.Tensor]:
    """Per group, `A = R - mean(R)` over total rewards; optionally divided by `std(R) + eps`.

    Centring alone matches the Python original; std normalisation is off by default because it
    inflates tiny reward differences. The std is the population std, so a group of one gets 0.
    """
    import torch

    advantages_P = []
    for group in groups_P:
        rewards_G = torch.tensor(group.get_total_rewards(), dtype=torch.float64)
        # Centre on the first reward before averaging, so a constant group gets exact zeros
        # (0.7 - mean([0.7] * 3) is not 0 in floating point) and is recognised as constant.
        shifted_G = rewards_G - rewards_G[:1]
        advantages_G = shifted_G - shifted_G.mean()
        if normalize_std:
            advantages_G = advantages_G / (rewards_G.std(correction=0) + eps)
        advantages_P.append(advantages_G)
    return advantages_P
