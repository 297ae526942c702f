"""BCO (Binary Classifier Optimization, Jung et al. 2024, arXiv:2404.04656): preference learning
from unpaired examples, each completion labelled desirable or undesirable (KTO's data), as a
binary classifier whose logit is the implicit reward `beta r` (`r = lp - ref`, the completion's
summed log-ratio against the frozen reference) shifted by `delta`, the running mean of every
reward seen in training so far:

- desirable: `-log sigma(beta r - delta)`
- undesirable: `-log sigma(-(beta r - delta))`

and the loss is the mean over the batch's examples. This is what TRL's `BCOTrainer.bco_loss`
computed (TRL 0.x, last in `trl.experimental.bco` of 0.26; TRL 1.16 dropped the trainer and keeps
only the paired form, DPO's `bco_pair`, which is this loss at `delta = 0` on equal numbers of
each kind): `delta` is updated with the batch's rewards (no gradient) *before* the loss uses it,
and held-out evaluation reads it without updating it. TRL keeps the mean in float32; kitchen in
float64.

Not built: the paper's underlying-distribution matching (TRL's `match_underlying_distribution`,
a classifier on prompt embeddings whose density ratio reweights the undesirable examples).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from train_core.preference.dpo import weights_and_refs
from train_core.preference.kto import sequence_logratios, unpaired_reward_metrics
from train_core.types import Datum

if TYPE_CHECKING:
    import torch

BcoCustomLossFn = Callable[[Sequence[Datum], list["torch.Tensor"]], tuple["torch.Tensor", dict[str, float]]]


@dataclass
class RunningMean:
    """The mean of every value `update` has seen (TRL's `RunningMoments.mean`), kept as a mean and
    a count so that it updates in O(batch). Mutable: one object follows a run's steps in order,
    and a checkpoint stores it so that a resumed run goes on from the same `delta`."""

    mean: float = 0.0
    count: int = 0

    def update(self, values: torch.Tensor) -> None:
        if values.numel() == 0:
            return
        total = self.count + values.numel()
        self.mean += (float(values.detach().double().mean()) - self.mean) * values.numel() / total
        self.count = total


def bco_loss(
    logratio_B: torch.Tensor, desirable_B: torch.Tensor, delta: float, beta: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """The BCO loss of B examples from their log-ratios `r` (gradients flow) and labels (bool),
    with the reward shift `delta` (a constant), and metrics: `bco_loss`, `delta`,
    `desirable_reward`, `undesirable_reward` (mean `beta r` of each kind, 0 when a batch has
    none), `reward_margin` (their difference), `accuracy` (share of examples the classifier puts
    on their label's side of `delta`), `num_desirable`, `num_undesirable`."""
    import torch
    import torch.nn.functional as F

    if logratio_B.dim() != 1 or logratio_B.shape != desirable_B.shape or logratio_B.numel() == 0:
        raise ValueError(
            f"bco_loss wants non-empty 1-D log-ratios and labels of one shape, got "
            f"{tuple(logratio_B.shape)} and {tuple(desirable_B.shape)}"
        )
    desirable_B = desirable_B.bool()
    logit_B = beta * logratio_B - delta
    loss = torch.where(desirable_B, -F.logsigmoid(logit_B), -F.logsigmoid(-logit_B)).mean()
    with torch.no_grad():
        right_B = torch.where(desirable_B, logit_B > 0, logit_B < 0)
        metrics = {
            "bco_loss": loss.item(),
            "delta": delta,
            **unpaired_reward_metrics(beta * logratio_B, desirable_B, right_B),
        }
    return loss, metrics


def bco_from_token_logprobs(
    logprobs_D: Sequence[torch.Tensor],
    ref_logprobs_D: Sequence[torch.Tensor],
    weights_D: Sequence[torch.Tensor],
    desirable_B: Sequence[bool],
    beta: float,
    running: RunningMean,
    update: bool,
) -> tuple[torch.Tensor, dict[str, float]]:
    """`bco_loss` of B examples' data from per-token logprobs; `update`: first add the batch's
    rewards to `running` (training), else read it as it is (evaluation)."""
    import torch

    if not len(logprobs_D) == len(ref_logprobs_D) == len(desirable_B):
        raise ValueError(
            f"{len(logprobs_D)} logprob and {len(ref_logprobs_D)} reference tensors for {len(desirable_B)} examples"
        )
    logratio_B = sequence_logratios(logprobs_D, ref_logprobs_D, weights_D)
    if update:
        running.update(beta * logratio_B.detach())
    labels_B = torch.tensor(list(desirable_B), dtype=torch.bool, device=logratio_B.device)
    return bco_loss(logratio_B, labels_B, running.mean, beta)


def make_bco_custom_loss(
    ref_logprobs_D: Sequence[torch.Tensor], desirable_B: Sequence[bool], beta: float, running: RunningMean
) -> BcoCustomLossFn:
    """The custom loss for `forward_backward_custom` on one BCO batch: updates `running` when the
    backend runs it (steps run in order, so each sees the mean of the steps before it and its own)."""
    ref_D = [ref.detach() for ref in ref_logprobs_D]
    labels = list(desirable_B)

    def bco_custom_loss(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        if not len(data) == len(logprobs_D) == len(ref_D) == len(labels):
            raise ValueError(
                f"{len(data)} data, {len(logprobs_D)} logprob and {len(ref_D)} reference tensors for "
                f"{len(labels)} BCO examples"
            )
        weights_D, refs_D = weights_and_refs(data, logprobs_D, ref_D)
        loss, metrics = bco_from_token_logprobs(logprobs_D, refs_D, weights_D, labels, beta, running, update=True)
        metrics["num_tokens"] = float(sum(w.sum().item() for w in weights_D))
        return loss, metrics

    return bco_custom_loss
