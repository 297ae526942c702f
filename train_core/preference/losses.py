"""Pairwise preference losses on sequence logprobs, in one table (as `train_core.losses` is for
the per-token losses), selected by name (`loss_type`), alone or as a weighted sum.

Inputs per pair p: `lc`, `lr` the policy's summed logprobs of the chosen and rejected completions
(gradients flow through them), `rc`, `rr` the frozen reference's, `nc`, `nr` the completions'
token counts. `c = lc - rc` and `r = lr - rr` are the log-ratios; `sigma` is the logistic
function. Every formula returns one loss per pair; a term of the objective is their mean, and the
objective is `sum_i weight_i * term_i` (TRL's `loss_type: [..]` with `loss_weights`).

Every name TRL's `DPOTrainer` (1.16) accepts means what it computes there (`_compute_loss`,
cross-checked on the same tensors, value and gradient, in
`tests/rlhf/test_preference_losses_vs_trl.py`), so a config ported from TRL keeps its meaning.
The f-divergence (`f_divergence`, f-DPO, Wang et al. 2023) replaces the log-ratios by `f'(u)` of
the density ratio `u = exp(c)` in the losses built on the chosen-rejected difference (`FDIV_LOSSES`):
reverse KL `log u` (DPO), forward KL `1 - 1/u`, JS `log 2 + log sigma(log u)`, alpha divergence
`(u^(alpha-1) - 1) / (alpha - 1)` (TRL clamps `(alpha-1) log u` at 80 before exponentiating: so
does kitchen). With `s_c`, `s_r` those scores and `d = s_c - s_r`:

- `sigmoid` (DPO, Rafailov et al. 2023): `-log sigma(beta d)`. No label smoothing: TRL 1.x's
  `sigmoid` ignores it too (TRL before 1.0 smoothed inside `sigmoid`; that loss is `cdpo` here).
- `hinge` (SLiC-HF, Zhao et al. 2023): `max(0, 1 - beta d)`.
- `ipo` (IPO, Azar et al. 2023, eq. 17, as TRL computes it): on **length-averaged** scores,
  `(s_c / nc - s_r / nr - 1 / (2 beta))^2`; beta is the paper's tau (TRL's length averaging is
  not in the paper; its authors confirmed it to TRL).
- `exo_pair` (EXO, Ji et al. 2024, eq. 16, K = 2) with eps = `label_smoothing` > 0:
  `q log(q / (1 - eps)) + (1 - q) log((1 - q) / eps)` with `q = sigma(beta d)`.
- `nca_pair` (NCA, Chen et al. 2024): `-log sigma(beta c) - log sigma(-beta c) / 2 - log sigma(-beta r) / 2`.
- `robust` (rDPO, Chowdhury et al. 2024, as TRL defines it): the unbiased estimate under label
  flips at rate eps, `((1 - eps) (-log sigma(beta d)) - eps (-log sigma(-beta d))) / (1 - 2 eps)`.
- `bco_pair` (BCO on pairs, Jung et al. 2024, as TRL 1.16 computes it: without the paper's
  running reward mean): `-log sigma(beta c) - log sigma(-beta r)`.
- `sppo_hard` (SPPO, Wu et al. 2024, hard labels): `(c - 1 / (2 beta))^2 + (r + 1 / (2 beta))^2`.
- `aot` (AOT, Melnyk et al. 2024, paired): the batch's sorted `lc - lr` against its sorted
  `rc - rr`, each difference `delta` in the label-smoothed sigmoid
  `(1 - eps) (-log sigma(beta delta)) + eps (-log sigma(-beta delta))`; couples the batch.
- `aot_unpaired` (AOT, unpaired): the same on the sorted `c` against the sorted `r`.
- `apo_zero` (APO, D'Oosterlinck et al. 2024, eq. 7): `1 - sigma(beta c) + sigma(beta r)`.
- `apo_down` (APO, eq. 8): `sigma(beta c) + 1 - sigma(beta (c - r))`.
- `discopop` (DiscoPOP, Chris Lu et al. 2024, eq. 5) with tau = `discopop_tau`, `x = beta d`:
  `(1 - sigma(x / tau)) (-log sigma(x)) + sigma(x / tau) exp(-x)`.
- `sft`: the chosen completions' NLL, one token mean over the whole batch's chosen tokens
  (`-sum(lc) / sum(nc)`, of the plain logprobs even under `ld_alpha`); RPO's term (Pang et al.
  2024), TRL < 1.0's `rpo_alpha`. Where TRL divides 0 by 0 (no chosen token in the batch: NaN)
  kitchen's is 0.
- `sigmoid_norm`: DPO on length-averaged scores, `-log sigma(beta (s_c / nc - s_r / nr))`.

Names beyond `DPOConfig`'s (TRL's CPO/ORPO trainers compute them; `alphapo` is the CPO trainer's name):

- `cdpo` (conservative DPO, Mitchell 2023; TRL's label-smoothed CPO `sigmoid`):
  `(1 - eps) (-log sigma(beta d)) + eps (-log sigma(-beta d))`.
- `simpo` (SimPO, Meng et al. 2024, eq. 6; TRL's CPO `simpo`), reference-free and
  length-normalised: `-log sigma(beta lc / nc - beta lr / nr - gamma)`.
- `orpo` (ORPO, Hong et al. 2024, eqs. 6-7), reference-free: the chosen completion's per-token
  NLL plus `lambda * -log sigma(log odds(c) - log odds(r))`, where `log odds(y) = a - log(1 -
  exp(a))` with `a` the mean per-token logprob of y. The NLL is the paper's per-pair token mean;
  TRL takes one token mean over the whole batch's chosen tokens, which is the same number when
  the chosen completions are equally long.
- `alphapo` (AlphaPO, Gupta et al. 2025, arXiv:2501.03884; TRL 1.16's `CPOConfig(loss_type="alphapo",
  alpha=...)`, which is CPO's `simpo` with the AlphaPO reward): SimPO on the rewards
  `u(y) = (1 - p(y)^(-alpha)) / alpha` of the length-averaged probability `p(y) = exp(l / n)`,
  `(1 - eps) (-log sigma(x)) + eps (-log sigma(-x))` with `x = beta (u_c - u_r) - gamma`
  (gamma = `simpo_gamma`, alpha = `alphapo_alpha`, eps = `label_smoothing`, which TRL's CPO
  `simpo` reads). alpha = 0 is the limit `u = l / n`: `simpo` (as TRL switches on `alpha != 0`).
  kitchen computes `1 - p^(-alpha)` as `-expm1(-alpha l / n)`: the same number, except that for
  |alpha| below ~1e-3 TRL's subtraction cancels to a few significant bits and kitchen's does not.

WPO (`use_weighting`, Zhou et al. 2024, eq. 2 with TRL's aligned weights) multiplies every pair's
loss, in every term, by `w_c w_r`, `w = exp(mean over the completion of (lp_t - log sum_v p_v^2))`
(no gradient): `wpo_weights`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    import torch


PreferenceLossType = Literal[
    "sigmoid",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "aot",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
    "sft",
    "sigmoid_norm",
    "cdpo",
    "simpo",
    "orpo",
    "alphapo",
]
TRL_DPO_LOSS_TYPES: tuple[str, ...] = get_args(PreferenceLossType)[:15]
"""The 15 `DPOConfig.loss_type` values of TRL 1.16, in its order."""

FDivergence = Literal["reverse_kl", "forward_kl", "js_divergence", "alpha_divergence"]

LABEL_SMOOTHING_LOSSES: frozenset[str] = frozenset({"cdpo", "robust", "exo_pair", "aot", "aot_unpaired", "alphapo"})
"""The losses that read `label_smoothing`."""
FDIV_LOSSES: frozenset[str] = frozenset(
    {"sigmoid", "sigmoid_norm", "hinge", "ipo", "exo_pair", "robust", "discopop", "sft", "cdpo"}
)
"""The losses an f-divergence other than reverse KL applies to (TRL's list, and `cdpo`): those
built on the chosen-rejected score difference, where the f-DPO reparameterisation's `beta log Z`
cancels."""
BATCH_COUPLED_LOSSES: frozenset[str] = frozenset({"aot", "aot_unpaired"})
"""Losses that sort the batch, so a pair's loss is not its own (no per-pair WPO weight)."""


@dataclass(frozen=True)
class PairBatch:
    """Sequence logprobs and lengths of P pairs (1-D tensors of one shape).

    `chosen_plain` is the chosen completions' plain summed logprobs where `chosen` is weighted
    otherwise (LD-DPO's `ld_alpha`); None: `chosen`. `weights` are WPO's per-pair weights
    (constants); None: 1."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    chosen_ref: torch.Tensor
    rejected_ref: torch.Tensor
    chosen_len: torch.Tensor
    rejected_len: torch.Tensor
    chosen_plain: torch.Tensor | None = None
    weights: torch.Tensor | None = None

    @property
    def chosen_logratio(self) -> torch.Tensor:
        return self.chosen - self.chosen_ref

    @property
    def rejected_logratio(self) -> torch.Tensor:
        return self.rejected - self.rejected_ref

    @property
    def margin(self) -> torch.Tensor:
        return self.chosen_logratio - self.rejected_logratio

    @property
    def mean_margin(self) -> torch.Tensor:
        """The margin of per-token (length-averaged) log-ratios."""
        return self.chosen_logratio / self.chosen_len - self.rejected_logratio / self.rejected_len


@dataclass(frozen=True)
class PreferenceLossParams:
    beta: float = 0.1
    label_smoothing: float = 0.0
    simpo_gamma: float = 0.5
    orpo_lambda: float = 0.1
    discopop_tau: float = 0.05
    f_divergence: FDivergence = "reverse_kl"
    f_alpha: float = 0.5
    """alpha_divergence's alpha (TRL's `f_alpha_divergence_coef`)."""
    alphapo_alpha: float = 0.0
    """alphapo's reward shape (TRL's CPO `alpha`); 0 = SimPO's log-probability reward."""


ALPHA_EXP_BOUND = 80.0
"""TRL's clamp on `(alpha - 1) log u` before `exp` (alpha divergence), for float32."""


def f_scores(logratio_P: torch.Tensor, p: PreferenceLossParams) -> torch.Tensor:
    """`f'(u)` of the density ratio `u = exp(logratio)` for `p.f_divergence` (module doc)."""
    import torch.nn.functional as F

    if p.f_divergence == "reverse_kl":
        return logratio_P
    if p.f_divergence == "forward_kl":
        return 1.0 - (-logratio_P).exp()
    if p.f_divergence == "js_divergence":
        return math.log(2.0) + F.logsigmoid(logratio_P)
    if abs(p.f_alpha - 1.0) < 1e-6:  # alpha -> 1: f'(u) -> log u
        return logratio_P
    scaled_P = ((p.f_alpha - 1.0) * logratio_P).clamp(max=ALPHA_EXP_BOUND)
    return (scaled_P.exp() - 1.0) / (p.f_alpha - 1.0)


def _delta(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    return f_scores(b.chosen_logratio, p) - f_scores(b.rejected_logratio, p)


def _mean_delta(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    chosen_P = f_scores(b.chosen_logratio, p) / b.chosen_len.clamp(min=1.0)
    return chosen_P - f_scores(b.rejected_logratio, p) / b.rejected_len.clamp(min=1.0)


def _smoothed_sigmoid(x_P: torch.Tensor, eps: float) -> torch.Tensor:
    import torch.nn.functional as F

    return (1.0 - eps) * -F.logsigmoid(x_P) + eps * -F.logsigmoid(-x_P)


def sigmoid_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    return -F.logsigmoid(p.beta * _delta(b, p))


def hinge_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    return (1.0 - p.beta * _delta(b, p)).relu()


def ipo_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    return (_mean_delta(b, p) - 1.0 / (2.0 * p.beta)) ** 2


def exo_pair_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    x_P, eps = p.beta * _delta(b, p), p.label_smoothing
    q_chosen, q_rejected = x_P.sigmoid(), (-x_P).sigmoid()
    return q_chosen * (F.logsigmoid(x_P) - math.log1p(-eps)) + q_rejected * (F.logsigmoid(-x_P) - math.log(eps))


def nca_pair_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    chosen_P, rejected_P = p.beta * b.chosen_logratio, p.beta * b.rejected_logratio
    return -F.logsigmoid(chosen_P) - 0.5 * F.logsigmoid(-chosen_P) - 0.5 * F.logsigmoid(-rejected_P)


def robust_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    x_P, eps = p.beta * _delta(b, p), p.label_smoothing
    return ((1.0 - eps) * -F.logsigmoid(x_P) - eps * -F.logsigmoid(-x_P)) / (1.0 - 2.0 * eps)


def bco_pair_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    return -F.logsigmoid(p.beta * b.chosen_logratio) - F.logsigmoid(-p.beta * b.rejected_logratio)


def sppo_hard_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    half = 0.5 / p.beta
    return (b.chosen_logratio - half) ** 2 + (b.rejected_logratio + half) ** 2


def aot_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    policy_P = (b.chosen - b.rejected).sort().values
    reference_P = (b.chosen_ref - b.rejected_ref).sort().values
    return _smoothed_sigmoid(p.beta * (policy_P - reference_P), p.label_smoothing)


def aot_unpaired_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    delta_P = b.chosen_logratio.sort().values - b.rejected_logratio.sort().values
    return _smoothed_sigmoid(p.beta * delta_P, p.label_smoothing)


def apo_zero_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    return 1.0 - (p.beta * b.chosen_logratio).sigmoid() + (p.beta * b.rejected_logratio).sigmoid()


def apo_down_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    return (p.beta * b.chosen_logratio).sigmoid() + 1.0 - (p.beta * b.margin).sigmoid()


def discopop_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    x_P = p.beta * _delta(b, p)
    modulation_P = (x_P / p.discopop_tau).sigmoid()
    return -F.logsigmoid(x_P) * (1.0 - modulation_P) + (-x_P).exp() * modulation_P


def sft_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    chosen_P = b.chosen if b.chosen_plain is None else b.chosen_plain
    nll = -chosen_P.sum() / b.chosen_len.sum().clamp(min=1.0)
    return nll.expand_as(chosen_P)


def sigmoid_norm_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    return -F.logsigmoid(p.beta * _mean_delta(b, p))


def cdpo_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    return _smoothed_sigmoid(p.beta * _delta(b, p), p.label_smoothing)


def simpo_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    import torch.nn.functional as F

    return -F.logsigmoid(p.beta * b.chosen / b.chosen_len - p.beta * b.rejected / b.rejected_len - p.simpo_gamma)


def alphapo_reward(summed_logprob: torch.Tensor, length: torch.Tensor, alpha: float) -> torch.Tensor:
    """AlphaPO's reward of a completion, `(1 - p^(-alpha)) / alpha` of its length-averaged
    probability `p = exp(l / n)`; at alpha = 0, its limit `l / n`."""
    mean_logprob = summed_logprob / length
    if alpha == 0.0:
        return mean_logprob
    return -(-alpha * mean_logprob).expm1() / alpha


def alphapo_loss(b: PairBatch, p: PreferenceLossParams) -> torch.Tensor:
    margin_P = alphapo_reward(b.chosen, b.chosen_len, p.alphapo_alpha) - alphapo_reward(
        b.rejected, b.rejected_len, p.alphapo_alpha
    )
    return _smoothed_sigmoid(p.beta * margin_P - p.simpo_gamma, p.label_smoothing)


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
    source: str
    """Where the formula comes from (the paper, and TRL's name for it)."""


PREFERENCE_LOSSES: dict[str, PreferenceLossSpec] = {
    spec.name: spec
    for spec in (
        PreferenceLossSpec("sigmoid", sigmoid_loss, True, "DPO, Rafailov et al. 2023 (arXiv:2305.18290)"),
        PreferenceLossSpec("hinge", hinge_loss, True, "SLiC-HF, Zhao et al. 2023 (arXiv:2305.10425)"),
        PreferenceLossSpec("ipo", ipo_loss, True, "IPO, Azar et al. 2023 (arXiv:2310.12036), eq. 17"),
        PreferenceLossSpec("exo_pair", exo_pair_loss, True, "EXO, Ji et al. 2024 (arXiv:2402.00856), eq. 16"),
        PreferenceLossSpec("nca_pair", nca_pair_loss, True, "NCA, Chen et al. 2024 (arXiv:2402.05369)"),
        PreferenceLossSpec("robust", robust_loss, True, "rDPO, Chowdhury et al. 2024 (arXiv:2403.00409)"),
        PreferenceLossSpec("bco_pair", bco_pair_loss, True, "BCO, Jung et al. 2024 (arXiv:2404.04656)"),
        PreferenceLossSpec("sppo_hard", sppo_hard_loss, True, "SPPO, Wu et al. 2024 (arXiv:2405.00675)"),
        PreferenceLossSpec("aot", aot_loss, True, "AOT, Melnyk et al. 2024 (arXiv:2406.05882), paired"),
        PreferenceLossSpec("aot_unpaired", aot_unpaired_loss, True, "AOT, Melnyk et al. 2024, unpaired"),
        PreferenceLossSpec("apo_zero", apo_zero_loss, True, "APO, D'Oosterlinck et al. 2024 (arXiv:2408.06266), eq. 7"),
        PreferenceLossSpec("apo_down", apo_down_loss, True, "APO, D'Oosterlinck et al. 2024, eq. 8"),
        PreferenceLossSpec("discopop", discopop_loss, True, "DiscoPOP, Lu et al. 2024 (arXiv:2406.08414), eq. 5"),
        PreferenceLossSpec("sft", sft_loss, False, "RPO's NLL term, Pang et al. 2024 (arXiv:2404.19733)"),
        PreferenceLossSpec("sigmoid_norm", sigmoid_norm_loss, True, "DPO on length-averaged log-ratios (TRL)"),
        PreferenceLossSpec("cdpo", cdpo_loss, True, "conservative DPO, Mitchell 2023; TRL's CPO sigmoid"),
        PreferenceLossSpec("simpo", simpo_loss, False, "SimPO, Meng et al. 2024 (arXiv:2405.14734), eq. 6"),
        PreferenceLossSpec("orpo", orpo_loss, False, "ORPO, Hong et al. 2024 (arXiv:2403.07691), eqs. 6-7"),
        PreferenceLossSpec("alphapo", alphapo_loss, False, "AlphaPO, Gupta et al. 2025 (arXiv:2501.03884); TRL's CPO"),
    )
}


@dataclass(frozen=True)
class PreferenceObjective:
    """What a preference step minimises: `sum_i weight_i * mean_p(loss_i(p) * wpo_p)` over the
    `terms` (TRL's `loss_type` list with `loss_weights`), with the losses' parameters. Checked when
    built, as TRL's trainer checks its config: an unknown name, an f-divergence on a loss it does
    not apply to, `exo_pair` without label smoothing, WPO on a loss that sorts the batch."""

    terms: tuple[tuple[str, float], ...] = (("sigmoid", 1.0),)
    params: PreferenceLossParams = field(default_factory=PreferenceLossParams)
    use_weighting: bool = False

    def __post_init__(self) -> None:
        if not self.terms:
            raise ValueError("a preference objective needs at least one loss_type")
        names = [name for name, _ in self.terms]
        unknown = [name for name in names if name not in PREFERENCE_LOSSES]
        if unknown:
            raise ValueError(f"unknown preference loss {unknown[0]!r} (known: {', '.join(PREFERENCE_LOSSES)})")
        if self.params.f_divergence != "reverse_kl" and not set(names) <= FDIV_LOSSES:
            raise ValueError(
                f"f_divergence {self.params.f_divergence!r} applies only to {', '.join(sorted(FDIV_LOSSES))}; "
                f"loss_type {sorted(set(names) - FDIV_LOSSES)} has no f-divergence form (use reverse_kl)"
            )
        if "exo_pair" in names and not 0.0 < self.params.label_smoothing < 1.0:
            raise ValueError("exo_pair needs 0 < label_smoothing < 1 (the EXO paper suggests 1e-3)")
        if self.use_weighting and set(names) & BATCH_COUPLED_LOSSES:
            raise ValueError("use_weighting (WPO) does not apply to aot / aot_unpaired: they sort the batch's pairs")

    @property
    def uses_reference(self) -> bool:
        return any(PREFERENCE_LOSSES[name].uses_reference for name, _ in self.terms)


def objective_loss(objective: PreferenceObjective, batch: PairBatch) -> torch.Tensor:
    """The objective's value on the pairs (see `PreferenceObjective`)."""
    if batch.chosen.numel() == 0:
        raise ValueError("a preference loss needs at least one pair")
    total: torch.Tensor | None = None
    for name, weight in objective.terms:
        loss_P = PREFERENCE_LOSSES[name].formula(batch, objective.params)
        if batch.weights is not None:
            loss_P = loss_P * batch.weights
        term = loss_P.mean() * weight
        total = term if total is None else total + term
    assert total is not None  # terms is not empty
    return total


def preference_loss(
    loss_type: str | Sequence[str],
    batch: PairBatch,
    params: PreferenceLossParams,
    loss_weights: Sequence[float] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of `loss_type` (one name, or several summed with `loss_weights`, default 1 each)
    over the pairs, and DPO-style metrics (`dpo_loss` holds the loss value whatever the type;
    rewards are `beta * (logp - logp_ref)`)."""
    names = [loss_type] if isinstance(loss_type, str) else list(loss_type)
    weights = list(loss_weights) if loss_weights is not None else [1.0] * len(names)
    if len(weights) != len(names):
        raise ValueError(f"{len(weights)} loss_weights for {len(names)} loss types")
    objective = PreferenceObjective(tuple(zip(names, weights, strict=True)), params, batch.weights is not None)
    loss = objective_loss(objective, batch)
    resolution_P = rounding_resolution(batch.chosen, batch.rejected, batch.chosen_ref, batch.rejected_ref)
    return loss, pair_metrics(loss, batch.chosen_logratio, batch.rejected_logratio, params.beta, resolution_P)


def wpo_weights(
    logprobs_D: Sequence[torch.Tensor], log_sum_sq_probs_D: Sequence[torch.Tensor], weights_D: Sequence[torch.Tensor]
) -> torch.Tensor:
    """WPO's per-pair weights of interleaved `[c0, r0, c1, r1, ...]` datums: per datum
    `exp(mean over its completion tokens of (lp_t - log sum_v p_v(t)^2))` (TRL's aligned
    weighting; the policy's own probability of the completion, length-normalised and aligned to
    its sampling distribution), and per pair the product of its two. No gradient."""
    import torch

    with torch.no_grad():
        means = []
        for logprobs_T, lssp_T, weights_T in zip(logprobs_D, log_sum_sq_probs_D, weights_D, strict=True):
            mask_T = (weights_T > 0).to(logprobs_T.dtype)
            aligned = ((logprobs_T.detach() - lssp_T.to(logprobs_T.dtype)) * mask_T).sum()
            means.append(aligned / mask_T.sum().clamp(min=1.0))
        per_datum_D = torch.stack(means).exp()
        return per_datum_D[0::2] * per_datum_D[1::2]


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
