"""Pairwise preference losses on sequence logprobs, in one table (as `train_core.losses` is for
the per-token losses), selected by name (`loss_type`).

Inputs per pair p: `lc`, `lr` the policy's summed logprobs of the chosen and rejected completions
(gradients flow through them), `rc`, `rr` the frozen reference's, `nc`, `nr` the completions'
token counts. `h = (lc - rc) - (lr - rr)` is the DPO log-ratio margin, `sigma` the logistic
function. Every formula returns one loss per pair; the batch loss is their mean.

Every name TRL also uses means what TRL's DPO/CPO/ORPO trainers compute (cross-checked against
TRL on the same tensors in `tests/rlhf/test_preference_losses_vs_trl.py`), so a config ported
from TRL keeps its meaning:

- `sigmoid` (DPO, Rafailov et al. 2023): `-log sigma(beta h)`. No label smoothing: TRL 1.x's
  `sigmoid` ignores it too (TRL before 1.0 smoothed inside `sigmoid`; that loss is `cdpo` here).
- `cdpo` (conservative DPO, Mitchell 2023; TRL's label-smoothed sigmoid) with label-noise rate
  eps = `label_smoothing`: `(1 - eps) (-log sigma(beta h)) + eps (-log sigma(-beta h))`.
- `robust` (rDPO, Chowdhury et al. 2024, as TRL defines it): the unbiased estimate under label
  flips, `((1 - eps) (-log sigma(beta h)) - eps (-log sigma(-beta h))) / (1 - 2 eps)`.
- `ipo` (IPO, Azar et al. 2023, eq. 17, as TRL computes it): on **length-averaged** logprobs,
  `(h_avg - 1 / (2 beta))^2` with `h_avg = (lc - rc) / nc - (lr - rr) / nr`; beta is the
  paper's tau. (Summed logprobs would make the square grow with completion length.)
- `hinge` (SLiC-HF, Zhao et al. 2023): `max(0, 1 - beta h)`.
- `simpo` (SimPO, Meng et al. 2024, eq. 6; TRL's CPO `simpo`), reference-free and
  length-normalised: `-log sigma(beta lc / nc - beta lr / nr - gamma)`.
- `orpo` (ORPO, Hong et al. 2024, eqs. 6-7), reference-free: the chosen completion's per-token
  NLL plus `lambda * -log sigma(log odds(c) - log odds(r))`, where `log odds(y) = a - log(1 -
  exp(a))` with `a` the mean per-token logprob of y. The NLL is the paper's per-pair token mean;
  TRL takes one token mean over the whole batch's chosen tokens, which is the same number when
  the chosen completions are equally long.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch


PreferenceLossType = Literal["sigmoid", "cdpo", "robust", "ipo", "hinge", "simpo", "orpo"]
LABEL_SMOOTHING_LOSSES: frozenset[str] = frozenset({"cdpo", "robust"})
"""The losses that read `label_smoothing`."""


@dataclass(frozen=True)
class PairBatch:
    """Sequence logprobs and lengths of P pairs (1-D tensors of one shape)."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    chosen_ref: torch.Tensor
    rejected_ref: torch.Tensor
    chosen_len: torch.Tensor
    rejected_len: torch.Tensor

    @property
    def margin(self) -> torch.Tensor:
        return (self.chosen - self.chosen_ref) - (self.rejected - self.rejected_ref)

    @property
    def mean_margin(self) -> torch.Tensor:
        """The margin of per-token (length-averaged) log-ratios."""
        chosen = (self.chosen - self.chosen_ref) / self.chosen_len
        return chosen - (self.rejected - self.rejected_ref) / self.rejected_len


@dataclass(frozen=True)
class PreferenceLossParams:
    beta: float = 0.1
    label_smoothing: float = 0.0
    simpo_gamma: float = 0.5
    orpo_lambda: float = 0.1


def sigmoid_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    return -F.logsigmoid(p.beta * b.margin)


def cdpo_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    eps = p.label_smoothing
    return (1.0 - eps) * -F.logsigmoid(p.beta * b.margin) + eps * -F.logsigmoid(-p.beta * b.margin)


def robust_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    eps = p.label_smoothing
    clean, flipped = -F.logsigmoid(p.beta * b.margin), -F.logsigmoid(-p.beta * b.margin)
    return ((1.0 - eps) * clean - eps * flipped) / (1.0 - 2.0 * eps)


def ipo_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    return (b.mean_margin - 1.0 / (2.0 * p.beta)) ** 2


def hinge_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch

    return torch.relu(1.0 - p.beta * b.margin)


def simpo_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    return -F.logsigmoid(p.beta * b.chosen / b.chosen_len - p.beta * b.rejected / b.rejected_len - p.simpo_gamma)


def _log_odds(mean_logprob: torch.Tensor) -> torch.Tensor:
    """log(q / (1 - q)) for q = exp(mean_logprob) < 1, computed stably."""
    import torch

    clamped = torch.clamp(mean_logprob, max=-1e-6)
    return clamped - torch.log(-torch.expm1(clamped))


def orpo_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    mean_c, mean_r = b.chosen / b.chosen_len, b.rejected / b.rejected_len
    return -mean_c + p.orpo_lambda * -F.logsigmoid(_log_odds(mean_c) - _log_odds(mean_r))


@dataclass(frozen=True)
class PreferenceLossSpec:
    name: PreferenceLossType
    formula: Callable[[PairBatch, PreferenceLossParams], torch.Tensor]
    uses_reference: bool


PREFERENCE_LOSSES: dict[str, PreferenceLossSpec] = {
    spec.name: spec
    for spec in (
        PreferenceLossSpec("sigmoid", sigmoid_loss, True),
        PreferenceLossSpec("cdpo", cdpo_loss, True),
        PreferenceLossSpec("robust", robust_loss, True),
        PreferenceLossSpec("ipo", ipo_loss, True),
        PreferenceLossSpec("hinge", hinge_loss, True),
        PreferenceLossSpec("simpo", simpo_loss, False),
        PreferenceLossSpec("orpo", orpo_loss, False),
    )
}


def preference_loss(
    loss_type: str, batch: PairBatch, params: PreferenceLossParams
) -> tuple[torch.Tensor, dict[str, float]]:
    """The mean loss of `loss_type` over the pairs, and DPO-style metrics (`dpo_loss` holds the
    loss value whatever the type; rewards are `beta * (logp - logp_ref)`)."""

    if loss_type not in PREFERENCE_LOSSES:
        raise ValueError(f"unknown preference loss {loss_type!r} (known: {', '.join(PREFERENCE_LOSSES)})")
    if batch.chosen.numel() == 0:
        raise ValueError("a preference loss needs at least one pair")
    loss = PREFERENCE_LOSSES[loss_type].formula(batch, params).mean()
    resolution_P = rounding_resolution(batch.chosen, batch.rejected, batch.chosen_ref, batch.rejected_ref)
    return loss, pair_metrics(
        loss, batch.chosen - batch.chosen_ref, batch.rejected - batch.rejected_ref, params.beta, resolution_P
    )


FLOAT32_EPS = 2.0**-23
"""float32's relative spacing: one token logprob `x` is known to about `FLOAT32_EPS * |x|`."""


def rounding_resolution(*sequence_logprobs_P: torch.Tensor) -> torch.Tensor:
    """How far float32 rounding alone can move the margin `(lc - rc) - (lr - rr)` of each pair: one
    unit in the last place of every token logprob summed into the four sums, `eps * sum(|sum|)`
    (token logprobs are never positive, so `|sum|` is the sum of their magnitudes). Scoring the
    same tokens in a batch of another shape (another padding, another server's batching) moves
    each token logprob by about that much."""
    return FLOAT32_EPS * sum(s.detach().abs() for s in sequence_logprobs_P)  # type: ignore[return-value]


def pair_metrics(
    loss: torch.Tensor,
    chosen_logratio_P: torch.Tensor,
    rejected_logratio_P: torch.Tensor,
    beta: float,
    resolution_P: torch.Tensor,
) -> dict[str, float]:
    """DPO-style metrics of P pairs from their log-ratios `c = lp - ref` (chosen) and `r`
    (rejected): `dpo_loss` (the loss value), `accuracy = mean(c - r > resolution)`, `margin =
    mean(beta c - beta r)`, `chosen_reward = mean(beta c)`, `rejected_reward = mean(beta r)`,
    `num_pairs`.

    `resolution_P` (`rounding_resolution`) makes a tie a tie: while the policy equals the
    reference, `c - r` is 0 up to float rounding, and a strict `c > r` would count the pairs that
    the rounding of one particular batch happened to favour."""
    import torch

    with torch.no_grad():
        chosen_reward_P, rejected_reward_P = beta * chosen_logratio_P, beta * rejected_logratio_P
        return {
            "dpo_loss": loss.item(),
            "accuracy": (chosen_logratio_P - rejected_logratio_P > resolution_P).float().mean().item(),
            "margin": (chosen_reward_P - rejected_reward_P).mean().item(),
            "chosen_reward": chosen_reward_P.mean().item(),
            "rejected_reward": rejected_reward_P.mean().item(),
            "num_pairs": float(chosen_logratio_P.numel()),
        }
