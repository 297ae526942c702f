"""KTO (Ethayarajh et al. 2024): preference learning from unpaired examples, each completion
labelled desirable or undesirable, as TRL's `KTOTrainer` computes it (`loss_type="kto"`).

With `r = lp - ref` a completion's summed log-ratio against the frozen reference and `z` the
reference point, the batch's KL estimate `mean(lp_kl - ref_kl)` over *mismatched* prompt /
completion pairs (prompt i with completion i-1 of the batch), clamped at 0 and held constant:

- desirable: `w_d * (1 - sigma(beta (r - z)))`
- undesirable: `w_u * (1 - sigma(beta (z - r)))`

and the loss is the mean over the batch's examples. At the reference (`r = z = 0`) every loss
is `w / 2`. Data arrive as `[x_0 .. x_{B-1}, kl_0 .. kl_{B-1}]`: the B examples, then their B
mismatched pairs (`kl_datums` in `kitchen.families.preference.kto` builds them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from train_core.preference.dpo import sequence_logprobs, weights_and_refs
from train_core.types import Datum

if TYPE_CHECKING:
    import torch

KtoCustomLossFn = Callable[[Sequence[Datum], list["torch.Tensor"]], tuple["torch.Tensor", dict[str, float]]]


@dataclass(frozen=True)
class KtoParams:
    beta: float = 0.1
    desirable_weight: float = 1.0
    undesirable_weight: float = 1.0


def kto_loss(
    logratio_B: torch.Tensor, desirable_B: torch.Tensor, kl_logratio_B: torch.Tensor, params: KtoParams
) -> tuple[torch.Tensor, dict[str, float]]:
    """The KTO loss of B examples from their log-ratios `r` (gradients flow), their labels
    (bool) and the mismatched pairs' log-ratios (no gradient: the reference point is a
    constant), with metrics: `kto_loss`, `kl` (the reference point), `desirable_reward` and
    `undesirable_reward` (mean `beta r` of each kind, 0 when a batch has none), `reward_margin`
    (their difference), `accuracy` (share of examples whose reward sign matches the label),
    `num_desirable`, `num_undesirable`."""
    import torch

    if logratio_B.dim() != 1 or logratio_B.shape != desirable_B.shape or logratio_B.numel() == 0:
        raise ValueError(
            f"kto_loss wants non-empty 1-D log-ratios and labels of one shape, got "
            f"{tuple(logratio_B.shape)} and {tuple(desirable_B.shape)}"
        )
    desirable_B = desirable_B.bool()
    z = kl_logratio_B.detach().mean().clamp(min=0.0)
    beta = params.beta
    desirable_losses = params.desirable_weight * (1.0 - torch.sigmoid(beta * (logratio_B[desirable_B] - z)))
    undesirable_losses = params.undesirable_weight * (1.0 - torch.sigmoid(beta * (z - logratio_B[~desirable_B])))
    loss = torch.cat([desirable_losses, undesirable_losses]).mean()
    with torch.no_grad():
        reward_B = beta * logratio_B
        right_B = torch.where(desirable_B, reward_B > 0, reward_B < 0)
        metrics = {"kto_loss": loss.item(), "kl": z.item(), **unpaired_reward_metrics(reward_B, desirable_B, right_B)}
    return loss, metrics


def unpaired_reward_metrics(
    reward_B: torch.Tensor, desirable_B: torch.Tensor, right_B: torch.Tensor
) -> dict[str, float]:
    """The metrics every unpaired (desirable / undesirable) loss reports, so that KTO and BCO runs
    compare key for key: `desirable_reward` and `undesirable_reward` (mean reward of each kind, 0
    when a batch has none), `reward_margin` (their difference), `accuracy` (share of `right_B`),
    `num_desirable`, `num_undesirable`."""
    desirable_reward = reward_B[desirable_B].mean().item() if desirable_B.any() else 0.0
    undesirable_reward = reward_B[~desirable_B].mean().item() if (~desirable_B).any() else 0.0
    return {
        "desirable_reward": desirable_reward,
        "undesirable_reward": undesirable_reward,
        "reward_margin": desirable_reward - undesirable_reward,
        "accuracy": right_B.float().mean().item(),
        "num_desirable": float(desirable_B.sum().item()),
        "num_undesirable": float((~desirable_B).sum().item()),
    }


def sequence_logratios(
    logprobs_D: Sequence[torch.Tensor], ref_logprobs_D: Sequence[torch.Tensor], weights_D: Sequence[torch.Tensor]
) -> torch.Tensor:
    """Each datum's summed log-ratio `r = lp - ref` against the frozen reference, over its
    weighted tokens: the implicit reward (up to `beta`) of the unpaired losses."""
    return sequence_logprobs(logprobs_D, weights_D) - sequence_logprobs(ref_logprobs_D, weights_D)


def kto_from_token_logprobs(
    logprobs_D: Sequence[torch.Tensor],
    ref_logprobs_D: Sequence[torch.Tensor],
    weights_D: Sequence[torch.Tensor],
    desirable_B: Sequence[bool],
    params: KtoParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    """`kto_loss` of `[x_0 .. x_{B-1}, kl_0 .. kl_{B-1}]` data from per-token logprobs."""
    import torch

    size = len(desirable_B)
    if len(logprobs_D) != 2 * size or len(ref_logprobs_D) != 2 * size:
        raise ValueError(
            f"{len(logprobs_D)} logprob and {len(ref_logprobs_D)} reference tensors for {size} examples: "
            f"KTO data are the {size} examples then their {size} mismatched pairs"
        )
    logratio_D = sequence_logratios(logprobs_D, ref_logprobs_D, weights_D)
    labels_B = torch.tensor(list(desirable_B), dtype=torch.bool, device=logratio_D.device)
    return kto_loss(logratio_D[:size], labels_B, logratio_D[size:], params)


def make_kto_custom_loss(
    ref_logprobs_D: Sequence[torch.Tensor], desirable_B: Sequence[bool], params: KtoParams
) -> KtoCustomLossFn:
    """The custom loss for `forward_backward_custom` on one KTO batch (see the module)."""
    ref_D = [ref.detach() for ref in ref_logprobs_D]
    labels = list(desirable_B)

    def kto_custom_loss(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        if not len(data) == len(logprobs_D) == len(ref_D) == 2 * len(labels):
            raise ValueError(
                f"{len(data)} data, {len(logprobs_D)} logprob and {len(ref_D)} reference tensors for "
                f"{len(labels)} examples: KTO data are the examples then their mismatched pairs"
            )
        weights_D, refs_D = weights_and_refs(data, logprobs_D, ref_D)
        loss, metrics = kto_from_token_logprobs(logprobs_D, refs_D, weights_D, labels, params)
        metrics["num_tokens"] = float(sum(w.sum().item() for w in weights_D[: len(labels)]))
        return loss, metrics

    return kto_custom_loss
