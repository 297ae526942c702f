"""Advantage estimators: how a batch's total rewards become one advantage per trajectory.

Every estimator takes, per group, the total rewards `rewards_G` and the action-token counts
`lengths_G` of its trajectories (float64 tensors, one of each per group) and returns one advantage
tensor per group. Group-relative estimators (grpo, dr_grpo, rloo, opo) look at one group at a
time; the REINFORCE++ ones and grpo's `scale_rewards="batch"` look at the whole batch, so the batch
an estimator sees must be the batch that is trained.

Conventions shared by all: a group whose rewards are all equal gets exact zeros (centring starts
from the first reward, so `0.7 - mean([0.7] * 3)` cannot leave a rounding residue and the group is
recognised as constant downstream), and a group of one trajectory gets 0 (it has no baseline but
itself). `ADVANTAGE_ESTIMATORS` maps each `advantage_estimator` name to its function (the
built-ins, and a plugin's once registered: kitchen loads the `kitchen.advantage_estimators`
entry-point group into it); an estimator's options are its keyword-only parameters
(`estimator_options`). `data_processing.compute_advantages` applies one to a step's groups.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, get_args

from train_core.errors import InvalidInputError

if TYPE_CHECKING:
    import torch

ScaleRewards = Literal["group", "batch", "none"]
SCALE_REWARDS: tuple[ScaleRewards, ...] = get_args(ScaleRewards)

GRPO_STD_EPS = 1e-4
"""Added to the std before dividing (TRL's GRPOTrainer value)."""
WHITEN_VAR_EPS = 1e-8
"""Added to the variance before the inverse square root (verl's `masked_whiten` value)."""

AdvantageEstimator = Callable[..., "list[torch.Tensor]"]
"""`(rewards_P, lengths_P, **options) -> advantages_P`, one tensor per group."""


def _centred(rewards_G: torch.Tensor) -> torch.Tensor:
    """`r - mean(r)`, computed from `r - r[0]` so a constant group gives exact zeros."""
    shifted_G = rewards_G - rewards_G[:1]
    return shifted_G - shifted_G.mean()


def _std(values_N: torch.Tensor) -> torch.Tensor:
    """Bessel-corrected std (as torch's default, TRL's and verl's); 0 for fewer than two values."""
    return values_N.std() if values_N.numel() > 1 else values_N.new_zeros(())


def grpo(
    rewards_P: Sequence[torch.Tensor], lengths_P: Sequence[torch.Tensor], *, scale_rewards: ScaleRewards = "group"
) -> list[torch.Tensor]:
    """GRPO (DeepSeekMath): `A = (r - mean_G(r)) / (std + 1e-4)`, with TRL's `scale_rewards`:
    `group` divides by each group's std, `batch` by the std of every reward in the batch, `none`
    does not divide (Dr. GRPO's estimator)."""
    if scale_rewards not in SCALE_REWARDS:
        raise InvalidInputError(f"scale_rewards must be one of {list(SCALE_REWARDS)}, got {scale_rewards!r}")
    centred_P = [_centred(rewards_G) for rewards_G in rewards_P]
    if scale_rewards == "none":
        return centred_P
    if scale_rewards == "group":
        stds_P = [_std(rewards_G) for rewards_G in rewards_P]
    else:
        import torch

        stds_P = [_std(torch.cat(list(rewards_P)))] * len(rewards_P)
    return [centred_G / (std + GRPO_STD_EPS) for centred_G, std in zip(centred_P, stds_P, strict=True)]


def dr_grpo(rewards_P: Sequence[torch.Tensor], lengths_P: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Dr. GRPO: `A = r - mean_G(r)`, no std division (the std favours groups with tiny reward
    differences). Also the Python original's GRPO, and so kitchen's default."""
    return grpo(rewards_P, lengths_P, scale_rewards="none")


def rloo(rewards_P: Sequence[torch.Tensor], lengths_P: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """RLOO: each sample's baseline is the mean of the *other* G-1 rewards,
    `A_i = r_i - sum_{j != i} r_j / (G - 1)`, which equals `G / (G - 1) * (r_i - mean(r))`."""
    return [_centred(r_G) * (len(r_G) / (len(r_G) - 1)) if len(r_G) > 1 else _centred(r_G) for r_G in rewards_P]


def opo(rewards_P: Sequence[torch.Tensor], lengths_P: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """OPO's length-weighted baseline: `A_i = r_i - sum_j l_j r_j / sum_j l_j` with `l` the
    action-token count (the optimal baseline for a sequence-level reward under token-sum losses).
    A group without any action token falls back to the plain mean."""
    advantages_P = []
    for rewards_G, lengths_G in zip(rewards_P, lengths_P, strict=True):
        shifted_G = rewards_G - rewards_G[:1]
        total = lengths_G.sum()
        baseline = (lengths_G * shifted_G).sum() / total if bool(total > 0) else shifted_G.mean()
        advantages_P.append(shifted_G - baseline)
    return advantages_P


def _split_like(values_N: torch.Tensor, like_P: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return list(values_N.split([len(x) for x in like_P]))


def whiten(values_N: torch.Tensor, weights_N: torch.Tensor) -> torch.Tensor:
    """`(x - mean) / sqrt(var + 1e-8)` with mean and Bessel-corrected variance weighted by
    `weights_N` (verl's `masked_whiten` over tokens when the weights are token counts). Fewer than
    two units of weight: nothing to whiten, zeros."""
    total = weights_N.sum()
    if not bool(total > 1):
        return values_N.new_zeros(values_N.shape)
    shifted_N = values_N - values_N[:1]
    mean = (weights_N * shifted_N).sum() / total
    var = (weights_N * (shifted_N - mean) ** 2).sum() / (total - 1)
    return (shifted_N - mean) * (var + WHITEN_VAR_EPS).rsqrt()


def reinforce_pp(rewards_P: Sequence[torch.Tensor], lengths_P: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """REINFORCE++: the rewards whitened over the whole batch (no per-prompt baseline), every
    action token counting once, as verl and OpenRLHF whiten per-token returns."""
    import torch

    whitened_N = whiten(torch.cat(list(rewards_P)), torch.cat(list(lengths_P)))
    return _split_like(whitened_N, rewards_P)


def reinforce_pp_baseline(rewards_P: Sequence[torch.Tensor], lengths_P: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """REINFORCE++ with baseline: subtract each group's mean, then whiten over the batch as
    `reinforce_pp` does (the variant for several samples per prompt)."""
    import torch

    whitened_N = whiten(torch.cat([_centred(r_G) for r_G in rewards_P]), torch.cat(list(lengths_P)))
    return _split_like(whitened_N, rewards_P)


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "rloo": rloo,
    "opo": opo,
    "reinforce_pp": reinforce_pp,
    "reinforce_pp_baseline": reinforce_pp_baseline,
}


def register_estimator(name: str, estimator: AdvantageEstimator) -> None:
    """Add an estimator (a plugin's: the `kitchen.advantage_estimators` entry-point group).
    Registering the same function again changes nothing; another under a taken name is refused,
    so a plugin never shadows a built-in."""
    present = ADVANTAGE_ESTIMATORS.get(name)
    if present is estimator:
        return
    if present is not None:
        raise ValueError(f"an advantage estimator named {name!r} is already registered")
    ADVANTAGE_ESTIMATORS[name] = estimator


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator called `name`; an unknown name is an InvalidInputError listing the known ones."""
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown advantage_estimator {name!r}; known: {sorted(ADVANTAGE_ESTIMATORS)}"
        ) from None


def estimator_options(name: str) -> dict[str, object]:
    """The options `name` accepts (its keyword-only parameters) and their defaults."""
    parameters = inspect.signature(get_advantage_estimator(name)).parameters.values()
    return {p.name: p.default for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}
