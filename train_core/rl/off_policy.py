"""Correcting for the sampler and the trainer disagreeing (bf16 against fp32, another inference
engine, stale weights in async mode), instead of pretending their logprobs are equal.

Per action token, `w = exp(lp_trainer - lp_sampler)`: the trainer's logprob is the proximal
policy's (the weights the update starts from, from a forward pass before it), the sampler's is
the one recorded at sampling. Two corrections, as verl's rollout correction defines them:

- truncated importance sampling (`tis`): each token's loss is multiplied by `min(w, cap)`, per
  token (`token`) or one weight per sequence from the product of its tokens' ratios (`sequence`);
- masked importance sampling (`mis`): tokens whose `w` leaves `[low, high]` (`token`), or whole
  sequences whose product (`sequence`) or geometric mean (`geometric`) of ratios does, are left
  out of the loss (mask and advantage 0). `low` defaults to `1 / high`.

Both are stop-gradient factors, so they fold into the datums' advantages: every policy loss whose
tokens scale with their advantage runs them unchanged, on every backend. Log-ratios are clamped to
[-20, 20] before exponentiating (verl's safety bound). A sequence is a datum.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from train_core.errors import InvalidInputError
from train_core.losses import get_loss_fn
from train_core.rl.metrics import action_token_logprobs
from train_core.rl.types import Metrics
from train_core.types import Datum, TensorData

if TYPE_CHECKING:
    import torch

TISLevel = Literal["token", "sequence"]
MISLevel = Literal["token", "sequence", "geometric"]
LOG_RATIO_BOUND = 20.0


@dataclass(frozen=True)
class RolloutCorrection:
    """Which corrections to apply (None: that one is off) and their thresholds."""

    tis: TISLevel | None = None
    tis_cap: float = 2.0
    mis: MISLevel | None = None
    mis_high: float = 2.0
    mis_low: float | None = None
    """None: `1 / mis_high`."""

    def __post_init__(self) -> None:
        if self.tis not in (None, "token", "sequence"):
            raise InvalidInputError(f"tis must be token, sequence or None, got {self.tis!r}")
        if self.mis not in (None, "token", "sequence", "geometric"):
            raise InvalidInputError(f"mis must be token, sequence, geometric or None, got {self.mis!r}")
        if self.tis_cap <= 0:
            raise InvalidInputError(f"tis_cap must be > 0, got {self.tis_cap}")
        if not 0 < self.low <= self.mis_high:
            raise InvalidInputError(f"mis needs 0 < mis_low <= mis_high, got {self.low} and {self.mis_high}")

    @property
    def low(self) -> float:
        return self.mis_low if self.mis_low is not None else 1.0 / self.mis_high


def tis_weights(log_ratio_T: torch.Tensor, mask_T: torch.Tensor, level: TISLevel, cap: float) -> torch.Tensor:
    """One sequence's truncated importance weights, `min(w, cap)` per token (0 off the mask)."""
    action_T = mask_T > 0
    log_w_T = log_ratio_T if level == "token" else log_ratio_T[action_T].sum().expand_as(log_ratio_T)
    weights_T = log_w_T.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).exp().clamp(max=cap)
    return weights_T.where(action_T, 0.0)


def mis_keep(log_ratio_T: torch.Tensor, mask_T: torch.Tensor, level: MISLevel, low: float, high: float) -> torch.Tensor:
    """One sequence's tokens that masked importance sampling keeps (a bool per token, False off the
    mask): those whose ratio (`token`), or whose sequence's product (`sequence`) or geometric mean
    (`geometric`) of ratios, lies in [low, high]."""
    action_T = mask_T > 0
    if level == "token":
        log_w_T = log_ratio_T
    elif not bool(action_T.any()):
        return action_T
    else:
        actions = log_ratio_T[action_T]
        log_w_T = (actions.sum() if level == "sequence" else actions.mean()).expand_as(log_ratio_T)
    w_T = log_w_T.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).exp()
    return action_T & (w_T >= low) & (w_T <= high)


def mismatch_metrics(data_D: Sequence[Datum], trainer_logprobs_D: Sequence[torch.Tensor]) -> Metrics:
    """How far the sampler is from the trainer over the batch's action tokens: `mismatch/kl` (the
    k1 estimate of KL(sampler || trainer), mean of `lp_sampler - lp_trainer`) and the per-token
    ratio `w`'s mean, max and min. Empty without action tokens. `data_D` must hold its mask."""
    sampled_N, trainer_N = action_token_logprobs(data_D, trainer_logprobs_D, "trainer")
    if sampled_N.numel() == 0:
        return {}
    ratio_N = (trainer_N - sampled_N).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).exp()
    return {
        "mismatch/kl": (sampled_N - trainer_N).mean().item(),
        "mismatch/ratio_mean": ratio_N.mean().item(),
        "mismatch/ratio_max": ratio_N.max().item(),
        "mismatch/ratio_min": ratio_N.min().item(),
    }


def correct_off_policy(
    data_D: Sequence[Datum], trainer_logprobs_D: Sequence[torch.Tensor], correction: RolloutCorrection, loss_fn: str
) -> tuple[list[Datum], Metrics]:
    """The datums with `correction` folded in (advantages times the TIS weight; MIS-masked tokens
    get mask and advantage 0), and the mismatch metrics with `mismatch/masked_fraction` (action
    tokens MIS left out) and `mismatch/truncated_fraction` (action tokens whose TIS weight hit the
    cap). `trainer_logprobs_D` are the proximal policy's, per target token; `data_D` holds masks.
    """
    if (correction.tis or correction.mis) and get_loss_fn(loss_fn).scaled_by != "advantages":
        raise InvalidInputError(
            f"loss {loss_fn!r} does not scale each token's loss by its advantage, so importance "
            "corrections cannot be folded into its datums"
        )
    metrics = mismatch_metrics(data_D, trainer_logprobs_D)
    corrected_D: list[Datum] = []
    actions = masked = truncated = 0
    for datum, trainer_T in zip(data_D, trainer_logprobs_D, strict=True):
        mask_T = datum.loss_fn_inputs["mask"].to_torch().double()
        log_ratio_T = trainer_T.detach().double() - datum.loss_fn_inputs["logprobs"].to_torch().double()
        factor_T = mask_T.clone()
        if correction.tis is not None:
            weights_T = tis_weights(log_ratio_T, mask_T, correction.tis, correction.tis_cap)
            truncated += int(((weights_T >= correction.tis_cap) & (mask_T > 0)).sum())
            factor_T = weights_T
        keep_T = mask_T > 0
        if correction.mis is not None:
            keep_T = mis_keep(log_ratio_T, mask_T, correction.mis, correction.low, correction.mis_high)
        actions += int((mask_T > 0).sum())
        masked += int(((mask_T > 0) & ~keep_T).sum())
        # Observation tokens keep their (zero) advantage; action tokens get factor * advantage.
        advantages_T = datum.loss_fn_inputs["advantages"].to_torch().double()
        advantages_T = (factor_T * advantages_T).where((mask_T > 0) & keep_T, 0.0)
        inputs = {
            **datum.loss_fn_inputs,
            "advantages": TensorData.from_torch(advantages_T.float()),
            "mask": TensorData.from_torch((mask_T * keep_T).float()),
        }
        corrected_D.append(Datum(datum.model_input, inputs))
    metrics["mismatch/masked_fraction"] = masked / max(actions, 1)
    metrics["mismatch/truncated_fraction"] = truncated / max(actions, 1)
    return corrected_D, metrics
