"""Nash-MD, Nash learning from human feedback by mirror descent (Munos et al. 2023,
arXiv:2312.00886), as TRL's `NashMDTrainer._compute_losses` computes it
(`trl.experimental.nash_md`, TRL 1.0 to 1.9; TRL 1.16 no longer ships it).

Each prompt has two completions: `y` sampled from the policy and `y'` from the geometric mixture
`pi^(1-c) * pi_ref^c` (token by token, `log_softmax(c * ref_logits + (1 - c) * logits)`). A judge
gives `p`, the probability that `y` beats `y'`. The policy is trained on `y` alone with a
REINFORCE estimate of the preference against the mixture, `0.5` as control variate, and of the
KL divergence to the reference:

    loss = beta * sum_t (log pi(y_t) - log pi_ref(y_t)).detach() * log pi(y_t) - (p - 0.5) * sum_t log pi(y_t)

averaged over prompts. This follows TRL, which differs from the paper's mirror-descent update in
estimating both terms from the one policy sample per prompt; with a reward model TRL's `p` is
`sigmoid(r(y) - r(y'))`, which kitchen's reward-model judge gives too (`(1 - verdict) / 2`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from train_core.types import Datum

if TYPE_CHECKING:
    import torch

# The shape of `kitchen.engine.ports.CustomLossFn`, restated so train_core does not import kitchen.
NashMDCustomLossFn = Callable[[Sequence[Datum], list["torch.Tensor"]], tuple["torch.Tensor", dict[str, float]]]


def nash_md_loss(
    policy_PT: torch.Tensor,
    reference_PT: torch.Tensor,
    mask_PT: torch.Tensor,
    probability_P: torch.Tensor,
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean loss, per-prompt preference scores `(p - 0.5) * log pi(y)`, per-prompt KL estimates
    `log pi(y) - log pi_ref(y)`) of P policy completions' per-token logprobs `[P, T]` under the
    policy and the reference; `mask_PT` marks real tokens (padding counts zero, as TRL's masking
    does) and `probability_P` is the probability each completion beats the mixture's."""
    import torch

    shapes = {policy_PT.shape, reference_PT.shape, mask_PT.shape}
    if len(shapes) != 1 or policy_PT.dim() != 2 or policy_PT.shape[0] == 0:
        raise ValueError(f"nash_md_loss wants three [P, T] tensors of one shape (P > 0), got {sorted(shapes)}")
    if probability_P.shape != policy_PT.shape[:1]:
        raise ValueError(f"nash_md_loss: {tuple(probability_P.shape)} probabilities for {policy_PT.shape[0]} prompts")
    mask_PT = mask_PT.to(policy_PT.dtype)
    policy_PT = policy_PT * mask_PT
    reference_PT = reference_PT.detach() * mask_PT
    score_P = (probability_P.detach().to(policy_PT.dtype) - 0.5) * policy_PT.sum(1)
    with torch.no_grad():
        log_ratio_PT = policy_PT - reference_PT
    kl_P = (log_ratio_PT * policy_PT).sum(1)
    loss_P = beta * kl_P - score_P
    return loss_P.mean(), score_P, log_ratio_PT.sum(1)


def make_nash_md_custom_loss(
    ref_logprobs_D: Sequence[torch.Tensor], probability_D: Sequence[float], beta: float
) -> NashMDCustomLossFn:
    """The custom loss for `forward_backward_custom` on one datum per prompt, the policy's
    completion (its weights marking the completion tokens); `ref_logprobs_D` are the reference
    model's logprobs of each datum's targets and `probability_D` the judge's probability that the
    completion beats the mixture's.

    Metrics: `nash_md/score` and `nash_md/kl` (means over prompts, as TRL's `loss/score` and
    `loss/kl`), `nash_md/probability` (mean win probability) and `num_tokens`."""
    import torch

    ref_D = [ref.detach() for ref in ref_logprobs_D]
    probabilities = [float(p) for p in probability_D]
    if any(not 0.0 <= p <= 1.0 for p in probabilities):
        raise ValueError(f"nash_md: win probabilities must lie in [0, 1], got {probabilities}")

    def nash_md_custom_loss(
        data: Sequence[Datum], logprobs_D: list[torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if not len(data) == len(logprobs_D) == len(ref_D) == len(probabilities):
            raise ValueError(
                f"{len(data)} data, {len(logprobs_D)} logprob tensors, {len(ref_D)} reference logprob tensors "
                f"and {len(probabilities)} probabilities: Nash-MD wants one of each per prompt"
            )
        device = logprobs_D[0].device
        weights_D = [d.loss_fn_inputs["weights"].to_torch().to(device) for d in data]
        masks_D = [w > 0 for w in weights_D]
        policy_PT = torch.nn.utils.rnn.pad_sequence([lp[m] for lp, m in zip(logprobs_D, masks_D, strict=True)], True)
        reference_PT = torch.nn.utils.rnn.pad_sequence(
            [ref.to(device)[m].to(policy_PT.dtype) for ref, m in zip(ref_D, masks_D, strict=True)], True
        )
        mask_PT = torch.nn.utils.rnn.pad_sequence([m[m] for m in masks_D], True)
        probability_P = torch.tensor(probabilities, dtype=policy_PT.dtype, device=device)
        loss, score_P, kl_P = nash_md_loss(policy_PT, reference_PT, mask_PT, probability_P, beta)
        metrics = {
            "nash_md/score": score_P.detach().mean().item(),
            "nash_md/kl": kl_P.mean().item(),
            "nash_md/probability": probability_P.mean().item(),
            "num_tokens": float(sum(m.sum().item() for m in masks_D)),
        }
        return loss, metrics

    return nash_md_custom_loss
