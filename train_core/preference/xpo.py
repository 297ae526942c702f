"""XPO, Exploratory Preference Optimization (Xie et al. 2024, arXiv:2405.21046), as TRL's
`XPOTrainer._compute_losses` computes it (`trl.experimental.xpo`, TRL 1.0 to 1.9; TRL 1.16 no
longer ships it).

Each prompt has two completions: `y` sampled from the policy and `y~` from the reference model,
ranked by a judge or reward. The loss of a pair is online DPO's on them plus `alpha` times the
policy's sequence logprob of the reference's completion, `alpha * log pi(y~)`: minimising it lowers
the policy's probability of what the reference already says, pushing it to explore elsewhere.

Where TRL differs from the paper, this follows TRL:
- the paper trains on every pair gathered so far; TRL (and kitchen) on the current step's pairs;
- the pair's DPO term is `sigmoid` (`-logsigmoid(beta * logits)`) or `ipo` (`(logits - 1/(2 beta))^2`
  on summed, not length-averaged, log-ratios), where `logits = (lp_c - ref_c) - (lp_r - ref_r)`;
- a tie (equal scores) counts the policy's completion as chosen (TRL's `model_scores >= ref_scores`);
- the exploration term is `alpha * log pi(y~)` on sequence sums, averaged with the DPO term over pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, get_args

from train_core.preference.dpo import pair_sequence_logprobs
from train_core.preference.losses import pair_metrics, rounding_resolution
from train_core.types import Datum

if TYPE_CHECKING:
    import torch

XPOLossType = Literal["sigmoid", "ipo"]
XPO_LOSS_TYPES: tuple[str, ...] = get_args(XPOLossType)

# The shape of `kitchen.engine.ports.CustomLossFn`, restated so train_core does not import kitchen.
XpoCustomLossFn = Callable[[Sequence[Datum], list["torch.Tensor"]], tuple["torch.Tensor", dict[str, float]]]


def xpo_loss(
    policy_on_policy_P: torch.Tensor,
    policy_on_reference_P: torch.Tensor,
    reference_on_policy_P: torch.Tensor,
    reference_on_reference_P: torch.Tensor,
    policy_chosen_P: torch.Tensor,
    beta: float,
    alpha: float,
    loss_type: str = "sigmoid",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean loss, per-pair DPO terms, per-pair exploration terms) of P pairs of sequence logprobs.

    `policy_on_reference_P` is `log pi(y~)` (the policy scoring the reference's completion), and so
    on; `policy_chosen_P` (bool) marks the pairs whose policy completion the judge preferred or tied."""
    import torch
    import torch.nn.functional as F

    if loss_type not in XPO_LOSS_TYPES:
        raise ValueError(f"xpo loss_type {loss_type!r}: XPO has {' and '.join(XPO_LOSS_TYPES)}")
    tensors = (policy_on_policy_P, policy_on_reference_P, reference_on_policy_P, reference_on_reference_P)
    shapes = {t.shape for t in (*tensors, policy_chosen_P)}
    if len(shapes) != 1 or policy_on_policy_P.dim() != 1 or policy_on_policy_P.numel() == 0:
        raise ValueError(f"xpo_loss wants five 1-D tensors of one non-empty shape, got shapes {sorted(shapes)}")
    chosen = policy_chosen_P.bool()
    chosen_logratio_P = torch.where(
        chosen, policy_on_policy_P - reference_on_policy_P, policy_on_reference_P - reference_on_reference_P
    )
    rejected_logratio_P = torch.where(
        chosen, policy_on_reference_P - reference_on_reference_P, policy_on_policy_P - reference_on_policy_P
    )
    logits_P = chosen_logratio_P - rejected_logratio_P
    dpo_P = -F.logsigmoid(beta * logits_P) if loss_type == "sigmoid" else (logits_P - 1 / (2 * beta)) ** 2
    exploration_P = alpha * policy_on_reference_P
    return (dpo_P + exploration_P).mean(), dpo_P, exploration_P


def make_xpo_custom_loss(
    ref_logprobs_D: Sequence[torch.Tensor],
    policy_chosen_P: Sequence[bool],
    beta: float,
    alpha: float,
    loss_type: str = "sigmoid",
) -> XpoCustomLossFn:
    """The custom loss for `forward_backward_custom` on data interleaved `[y_0, y~_0, y_1, y~_1, ...]`
    (the policy's completion, then the reference's, per prompt), their weights marking the
    completion tokens; `ref_logprobs_D` are the reference model's logprobs of each datum's targets.

    Metrics: `xpo/dpo_loss` and `xpo/exploration` (means of the two terms), `xpo/policy_chosen`
    (fraction of pairs the policy's completion won or tied) and DPO's pair metrics (`accuracy`,
    `margin`, ...; `dpo_loss` is the whole loss)."""
    import torch

    ref_D = [ref.detach() for ref in ref_logprobs_D]
    chosen = list(policy_chosen_P)

    def xpo_custom_loss(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        if not len(data) == len(logprobs_D) == len(ref_D) == 2 * len(chosen):
            raise ValueError(
                f"{len(data)} data, {len(logprobs_D)} logprob tensors, {len(ref_D)} reference logprob tensors "
                f"and {len(chosen)} verdicts: XPO wants two data per verdict"
            )
        devices_D = [lp.device for lp in logprobs_D]
        weights_D = [d.loss_fn_inputs["weights"].to_torch().to(dev) for d, dev in zip(data, devices_D, strict=True)]
        refs_D = [ref.to(dev) for ref, dev in zip(ref_D, devices_D, strict=True)]
        on_policy_P, on_reference_P = pair_sequence_logprobs(logprobs_D, weights_D)
        ref_on_policy_P, ref_on_reference_P = pair_sequence_logprobs(refs_D, weights_D)
        chosen_P = torch.tensor(chosen, device=on_policy_P.device)
        loss, dpo_P, exploration_P = xpo_loss(
            on_policy_P, on_reference_P, ref_on_policy_P, ref_on_reference_P, chosen_P, beta, alpha, loss_type
        )
        with torch.no_grad():
            policy_ratio_P, reference_ratio_P = on_policy_P - ref_on_policy_P, on_reference_P - ref_on_reference_P
            chosen_ratio_P = torch.where(chosen_P, policy_ratio_P, reference_ratio_P)
            rejected_ratio_P = torch.where(chosen_P, reference_ratio_P, policy_ratio_P)
            resolution_P = rounding_resolution(on_policy_P, on_reference_P, ref_on_policy_P, ref_on_reference_P)
            metrics = pair_metrics(loss, chosen_ratio_P, rejected_ratio_P, beta, resolution_P)
            metrics["xpo/dpo_loss"] = dpo_P.mean().item()
            metrics["xpo/exploration"] = exploration_P.mean().item()
            metrics["xpo/policy_chosen"] = chosen_P.float().mean().item()
            metrics["num_tokens"] = float(sum(w.sum().item() for w in weights_D))
        return loss, metrics

    return xpo_custom_loss
