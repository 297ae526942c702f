"""The Tinker service's built-in loss functions as pure torch, and kitchen's extensions of them.

Each formula returns the loss of every token; a batch's loss is their sum (over tokens, and so over
datums when the tokens of a batch are concatenated): there is no mean, which is what makes
gradients accumulate across `forward_backward` calls the way the Tinker service's do (a mean, or
verl's other aggregations, is per-token factors folded into the datums: `train_core.rl.policy_objective`).
Notation: `logprobs_T` is the current policy's logprob of each target token (carrying gradients),
`sampling_logprobs_T` the sampler's, `advantages_T` the advantage of each token,
`ratio_T = exp(logprobs_T - sampling_logprobs_T)`.

Every loss but `gspo` and `vespo` is a sum of per-token terms; those two couple the tokens of one
datum (one sequence) through its sequence ratio, so its spec is `per_datum` and backends hand it each datum's
length. A `LossSpec` binds a formula to the `loss_fn_inputs` keys it reads and the `loss_fn_config` keys
it accepts; `get_loss_fn(name)` looks one up and fails loudly on unknown names, so a typo can
never fall back to cross-entropy. What the Tinker service does not run itself is marked: a loss
that is kitchen's own (`builtin=False`: `decoupled_ppo`, `sapo`, `vespo`) or a config key kitchen adds to a built-in
(`extension_keys`: ppo's dual clip); `custom_route_reasons` says when a request needs the
`forward_backward_custom` route there. Clipping losses report how many tokens each clip held back.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from train_core.errors import InvalidInputError

if TYPE_CHECKING:
    import torch

# The formulas use tensor methods only, and torch is imported where a tensor is made: importing
# this module (loss names and specs, for `kitchen validate`) does not load torch.


def cross_entropy(logprobs_T: torch.Tensor, weights_T: torch.Tensor) -> torch.Tensor:
    """Supervised loss: `-lp * weights`."""
    return -(logprobs_T * weights_T)


def _token_ratio(logprobs_T: torch.Tensor, sampling_logprobs_T: torch.Tensor) -> torch.Tensor:
    """`exp(lp - q)` per token: how much likelier the current policy makes each token."""
    return (logprobs_T - sampling_logprobs_T).exp()


def _clipped_surrogate(
    ratio_T: torch.Tensor, advantages_T: torch.Tensor, low: float, high: float, dual: float
) -> torch.Tensor:
    """`-min(ratio * A, clip(ratio, low, high) * A)`, and with a finite `dual` (dual-clip PPO)
    capped at `-dual * A` where `A < 0`, so a negative-advantage token whose ratio exploded
    cannot push the loss (and its gradient) without bound."""
    loss_T = -(ratio_T * advantages_T).minimum(ratio_T.clamp(low, high) * advantages_T)
    if math.isfinite(dual):
        loss_T = loss_T.minimum(-dual * advantages_T).where(advantages_T < 0, loss_T)
    return loss_T


def importance_sampling(
    logprobs_T: torch.Tensor, sampling_logprobs_T: torch.Tensor, advantages_T: torch.Tensor
) -> torch.Tensor:
    """REINFORCE with an importance weight for off-policy samples: `-ratio * A`."""
    return -(_token_ratio(logprobs_T, sampling_logprobs_T) * advantages_T)


def ppo(
    logprobs_T: torch.Tensor,
    sampling_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    clip_low_threshold: float = 0.8,
    clip_high_threshold: float = 1.2,
    clip_ratio_c: float = math.inf,
) -> torch.Tensor:
    """Clipped surrogate: `-min(ratio * A, clip(ratio, low, high) * A)`.

    The thresholds bound the ratio itself (0.8 / 1.2 is epsilon 0.2), as the Tinker service's are;
    an asymmetric pair is DAPO's clip-higher (0.8 / 1.28 is verl's `clip_ratio_low` 0.2 and
    `clip_ratio_high` 0.28). `clip_ratio_c` (verl's name, dual-clip PPO; > 1, off by default) caps
    a negative-advantage token's loss at `-clip_ratio_c * A`; it is kitchen's extension, which the
    Tinker service's built-in `ppo` does not take.
    """
    ratio_T = _token_ratio(logprobs_T, sampling_logprobs_T)
    return _clipped_surrogate(ratio_T, advantages_T, clip_low_threshold, clip_high_threshold, clip_ratio_c)


def cispo(
    logprobs_T: torch.Tensor,
    sampling_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    clip_low_threshold: float = 0.0,
    clip_high_threshold: float = 4.0,
) -> torch.Tensor:
    """Clipped-ratio policy gradient: `-stopgrad(clip(ratio, low, high)) * lp * A`.

    The clipped ratio is only a coefficient, so no token's gradient is ever zeroed. The defaults
    (no lower bound, cap at 4) are the Tinker service's.
    """
    ratio_T = _token_ratio(logprobs_T, sampling_logprobs_T)
    coefficient_T = ratio_T.clamp(clip_low_threshold, clip_high_threshold).detach()
    return -(coefficient_T * logprobs_T * advantages_T)


def sapo(
    logprobs_T: torch.Tensor,
    sampling_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    temperature_pos: float = 1.0,
    temperature_neg: float = 1.05,
) -> torch.Tensor:
    """Soft Adaptive Policy Optimization (Gao et al. 2025, arXiv:2511.20347), as TRL 1.16's
    `loss_type="sapo"` computes it: a smooth gate in place of PPO's hard clip,

        -(4 / tau) * sigmoid(tau * (ratio - 1)) * A,   tau = temperature_pos where A > 0, else temperature_neg

    Its gradient is the plain policy gradient's at ratio 1 and fades as the ratio leaves 1 (faster
    for negative advantages, whose temperature is higher), so no token's gradient is cut to zero.
    """
    ratio_T = _token_ratio(logprobs_T, sampling_logprobs_T)
    positive_T = (advantages_T > 0).to(ratio_T.dtype)
    tau_T = positive_T * temperature_pos + (1.0 - positive_T) * temperature_neg
    return -((tau_T * (ratio_T - 1.0)).sigmoid() * (4.0 / tau_T) * advantages_T)


VESPO_LOG_WEIGHT_BOUNDS = (math.log(1e-8), 20.0)
"""TRL's clamp on each token's log-ratio (its upper end, and minus it) and on the sequence's summed
log weight, so one token cannot overflow the weight."""


def vespo(
    logprobs_T: torch.Tensor,
    sampling_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    sequence_ratio_mask_T: torch.Tensor,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
) -> torch.Tensor:
    """VESPO (arXiv:2602.10693), for one sequence, as TRL 1.16's `loss_type="vespo"` computes it:
    the policy gradient `-phi * A * lp` weighted by a gamma function of the sequence's importance
    weight `w = exp(sum over M of (lp - q))` (M = tokens where the mask is non-zero),

        phi = exp(lambda + k log w - lambda w)       (phi(1) = 1: on-policy it is the plain gradient)

    with no gradient through phi; `k`, `lambda` are the `_pos` ones where A >= 0, else the `_neg`
    ones. As TRL: each token's log-ratio clamped to [-20, 20], log w to [log 1e-8, 20], lambda at
    least 1e-4, and a non-finite phi taken as 0."""
    low, high = VESPO_LOG_WEIGHT_BOUNDS
    in_ratio_T = sequence_ratio_mask_T != 0
    drift_T = (logprobs_T.detach() - sampling_logprobs_T).clamp(-high, high)
    log_w = (drift_T * in_ratio_T.to(drift_T.dtype)).sum().clamp(low, high)
    nonneg_T = (advantages_T >= 0).to(drift_T.dtype)
    k_T = nonneg_T * k_pos + (1.0 - nonneg_T) * k_neg
    lambda_T = (nonneg_T * lambda_pos + (1.0 - nonneg_T) * lambda_neg).clamp(min=1e-4)
    phi_T = (lambda_T + k_T * log_w - lambda_T * log_w.exp()).exp().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    return -(phi_T * advantages_T * logprobs_T)


def dro(
    logprobs_T: torch.Tensor, sampling_logprobs_T: torch.Tensor, advantages_T: torch.Tensor, beta: float
) -> torch.Tensor:
    """Policy gradient with a quadratic penalty on drift: `-(lp * A - 0.5 * beta * (lp - q)^2)`."""
    drift_T = logprobs_T - sampling_logprobs_T
    return -(logprobs_T * advantages_T - 0.5 * beta * drift_T**2)


def _sequence_ratio(
    logprobs_T: torch.Tensor, sampling_logprobs_T: torch.Tensor, sequence_ratio_mask_T: torch.Tensor
) -> torch.Tensor:
    """GSPO's per-token ratio for one sequence: the value of `s = exp(mean over M of (lp - q))`
    (M = tokens where the mask is non-zero; s = 1 if M is empty) with each token's own gradient,
    `s_t = stopgrad(s) * exp(lp_t - stopgrad(lp_t))`."""
    in_ratio_T = sequence_ratio_mask_T != 0
    drift_T = logprobs_T.detach() - sampling_logprobs_T
    log_ratio = drift_T[in_ratio_T].mean() if bool(in_ratio_T.any()) else drift_T.new_zeros(())
    return (log_ratio + logprobs_T - logprobs_T.detach()).exp()


def gspo(
    logprobs_T: torch.Tensor,
    sampling_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    sequence_ratio_mask_T: torch.Tensor,
    clip_low_threshold: float = 1.0 - 3e-4,
    clip_high_threshold: float = 1.0 + 4e-4,
) -> torch.Tensor:
    """GSPO-token, for one sequence (one datum), as the Tinker service defines it:

        s   = exp(mean over M of (lp - q)),  M = tokens where sequence_ratio_mask != 0 (s = 1 if M is empty)
        s_t = stopgrad(s) * exp(lp_t - stopgrad(lp_t))      # s's value, lp_t's own gradient
        loss_t = -min(s_t * A_t, clip(s_t, low, high) * A_t)

    Clipping the sequence ratio keeps or drops the whole sequence at once, where ppo clips tokens
    one by one; per-token advantages still apply. Config: `clip_low_threshold` and
    `clip_high_threshold` bound the ratio itself, as ppo's do; the defaults are the GSPO paper's
    clip range (epsilon 3e-4 below, 4e-4 above). Tinker's published GSPO page gives the formula and
    the `sequence_ratio_mask` input but, as far as we could read it, not its config keys or
    defaults, and the tinker backend sends the config as given: set both thresholds when runs must
    agree across backends.
    """
    ratio_T = _sequence_ratio(logprobs_T, sampling_logprobs_T, sequence_ratio_mask_T)
    return _clipped_surrogate(ratio_T, advantages_T, clip_low_threshold, clip_high_threshold, math.inf)


def behaviour_weights(
    sampling_logprobs_T: torch.Tensor, proximal_logprobs_T: torch.Tensor, cap: float = math.inf
) -> torch.Tensor:
    """Decoupled PPO's behaviour importance weight `exp(prox - behaviour)` per token, 0 where it
    exceeds `cap` (AReaL's `behav_imp_weight_cap` masks such tokens out)."""
    weights_T = (proximal_logprobs_T - sampling_logprobs_T).exp()
    return weights_T.where(weights_T <= cap, 0.0)


def decoupled_ppo(
    logprobs_T: torch.Tensor,
    sampling_logprobs_T: torch.Tensor,
    proximal_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    clip_low_threshold: float = 0.8,
    clip_high_threshold: float = 1.2,
    clip_ratio_c: float = math.inf,
    behaviour_weight_cap: float = math.inf,
) -> torch.Tensor:
    """Decoupled PPO (Hilton et al.; AReaL's loss for asynchronous RL), three policies: the
    behaviour policy that sampled (`logprobs`, its logprobs), the proximal policy the update is
    kept near (`proximal_logprobs`, e.g. the trainer's weights when the batch was assembled) and
    the current one:

        w_t    = exp(prox_t - q_t), 0 where above behaviour_weight_cap   # off-policy correction
        loss_t = w_t * ppo_t(ratio = exp(lp_t - prox_t))                 # trust region around prox

    The clip (and dual clip) is ppo's; with `prox = q` it is ppo. Kitchen's own loss: the Tinker
    service has no built-in for it.
    """
    weighted_T = behaviour_weights(sampling_logprobs_T, proximal_logprobs_T, behaviour_weight_cap) * advantages_T
    ratio_T = _token_ratio(logprobs_T, proximal_logprobs_T)
    return _clipped_surrogate(ratio_T, weighted_T, clip_low_threshold, clip_high_threshold, clip_ratio_c)


TARGET_TOKENS = "target_tokens"
"""Every loss reads this key: the backend gathers `logprobs_T` at these token ids."""


def require_inputs(keys: Collection[str], required: Collection[str], user: str, where: str) -> None:
    """Raise a InvalidInputError naming the first `required` key absent from `keys`.

    `user` says who needs it (e.g. "loss 'ppo'"), `where` locates the datum (e.g. "datum 3").
    """
    for key in required:
        if key not in keys:
            raise InvalidInputError(
                f"{where}: {user} needs loss_fn_inputs[{key!r}] (it has {sorted(keys)}; needed: {list(required)})"
            )


ClipView = Callable[
    ["torch.Tensor", Mapping[str, "torch.Tensor"], Mapping[str, float]], "tuple[torch.Tensor, torch.Tensor]"
]
"""`(logprobs_T, inputs, config) -> (ratio_T, advantages_T)`: the ratio a loss clips and the
advantages its tokens carry, for the clip fractions."""

CLIP_COUNT_KEYS = ("loss/clipped_low:sum", "loss/clipped_high:sum", "loss/clipped_dual:sum")
POLICY_TOKENS_KEY = "loss/policy_tokens:sum"
"""Tokens that carry a policy-gradient signal (advantage != 0): the clip fractions' denominator."""


def clip_counts(
    ratio_T: torch.Tensor, advantages_T: torch.Tensor, low: float, high: float, dual: float = math.inf
) -> dict[str, float]:
    """How many tokens each clip holds back, as sums (they add up over micro-batches, workers
    and calls; the Tinker convention `name:sum`). A token counts where its clipped branch is the
    one taken, as TRL counts them: low = `ratio < low` with `A < 0`, high = `ratio > high` with
    `A > 0`, dual = `ratio > dual` with `A < 0`."""
    ratio_T, advantages_T = ratio_T.detach(), advantages_T.detach()
    negative_T, positive_T = advantages_T < 0, advantages_T > 0
    counts = (
        ((ratio_T < low) & negative_T).sum(),
        ((ratio_T > high) & positive_T).sum(),
        ((ratio_T > dual) & negative_T).sum(),
    )
    return {
        **{key: float(count) for key, count in zip(CLIP_COUNT_KEYS, counts, strict=True)},
        POLICY_TOKENS_KEY: float((negative_T | positive_T).sum()),
    }


def merge_loss_metrics(parts: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One call's metrics from its parts (micro-batches, workers, chunks): every `:sum` key added
    up. Backends return only such counts (the Tinker SDK merges a request's chunks by each
    metric's `:reduction` suffix); what the counts mean, `loss_ratios`, is derived where a step's
    metrics are reported."""
    merged: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            if key.endswith(":sum"):
                merged[key] = merged.get(key, 0.0) + float(value)
    return merged


ACTION_TOKENS_KEY = "loss/action_tokens:sum"
"""Tokens under the action mask: the denominator of the KL and entropy means (custom route)."""
_MEANS_OVER_ACTIONS = ("loss/kl:sum", "loss/entropy:sum", "loss/high_entropy_tokens:sum")


def loss_ratios(metrics: Mapping[str, float]) -> dict[str, float]:
    """What summed loss counts mean: `loss/clipfrac_low|high|dual`, the share of policy tokens each
    clip held back (for a clipping loss), and `loss/kl`, `loss/entropy`, means over action tokens
    (when the loss had those terms), and `loss/high_entropy_tokens`, the share of action tokens
    `top_entropy_quantile` kept. Empty when `metrics` holds none of the counts."""
    ratios: dict[str, float] = {}
    if POLICY_TOKENS_KEY in metrics:
        tokens = max(metrics[POLICY_TOKENS_KEY], 1.0)
        for key in CLIP_COUNT_KEYS:
            ratios[key.removesuffix(":sum").replace("clipped_", "clipfrac_")] = metrics.get(key, 0.0) / tokens
    if ACTION_TOKENS_KEY in metrics:
        actions = max(metrics[ACTION_TOKENS_KEY], 1.0)
        ratios.update(
            {key.removesuffix(":sum"): metrics[key] / actions for key in _MEANS_OVER_ACTIONS if key in metrics}
        )
    return ratios


@dataclass(frozen=True)
class LossSpec:
    """A named loss: its formula, the `loss_fn_inputs` it reads, and the config keys it accepts."""

    name: str
    formula: Callable[..., torch.Tensor]
    """Returns the loss of each token; the loss of a batch is their sum."""
    input_keys: tuple[str, ...]
    """The `loss_fn_inputs` tensors passed to `formula` after `logprobs_T`, in order."""
    per_datum: bool = False
    """The formula couples the tokens of a datum, so it runs on each datum and the results add up."""
    scaled_by: str | None = None
    """The input that scales each token's loss linearly (for any factor >= 0), so that per-token
    factors (loss aggregation, importance weights) fold into the datums; None: no such input."""
    builtin: bool = True
    """The Tinker service runs it as a built-in loss (else it is kitchen's own)."""
    extension_keys: tuple[str, ...] = ()
    """Config keys kitchen adds to the service's built-in loss (the service does not take them)."""
    clip_view: ClipView | None = None
    """For a clipping loss, what it clips (reported as clip fractions)."""

    @property
    def config_defaults(self) -> dict[str, float | None]:
        """Accepted `loss_fn_config` keys: the formula's remaining parameters, None if required."""
        params = list(inspect.signature(self.formula).parameters.values())[1 + len(self.input_keys) :]
        return {p.name: None if p.default is inspect.Parameter.empty else p.default for p in params}

    @property
    def required_inputs(self) -> tuple[str, ...]:
        """Every `loss_fn_inputs` key a datum must carry for this loss."""
        return (TARGET_TOKENS, *self.input_keys)

    def resolve_config(self, config: Mapping[str, float] | None) -> dict[str, float]:
        """Fill in defaults; unknown or missing required keys are errors, never silently ignored."""
        given = dict(config or {})
        defaults = self.config_defaults
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            raise InvalidInputError(
                f"loss {self.name!r} does not accept loss_fn_config keys {unknown} (accepted: {sorted(defaults)})"
            )
        resolved: dict[str, float] = {}
        for key, default in defaults.items():
            value = given.get(key, default)
            if value is None:
                raise InvalidInputError(f"loss {self.name!r} needs loss_fn_config[{key!r}]")
            resolved[key] = float(value)
        _check_clip_range(self.name, resolved)
        return resolved

    def custom_route_reasons(self, config: Mapping[str, float] | None) -> list[str]:
        """Why this loss with `config` cannot be sent to the Tinker service's built-in
        `forward_backward` (and so must run through `forward_backward_custom` there); empty when
        it can."""
        reasons = [] if self.builtin else [f"loss {self.name!r} is kitchen's own, not a Tinker built-in"]
        defaults = self.config_defaults
        for key in self.extension_keys:
            if key in (config or {}) and float((config or {})[key]) != defaults[key]:
                reasons.append(f"loss_fn_config[{key!r}] is kitchen's extension of {self.name!r}")
        return reasons

    def _tensors(self, logprobs_T: torch.Tensor, inputs: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
        require_inputs(inputs.keys(), self.input_keys, f"loss {self.name!r}", where="loss inputs")
        return [logprobs_T, *(inputs[key] for key in self.input_keys)]

    def token_losses(
        self,
        logprobs_T: torch.Tensor,
        inputs: Mapping[str, torch.Tensor],
        config: Mapping[str, float] | None = None,
        lengths_D: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """The loss of every token given, concatenated like `logprobs_T`.

        `lengths_D` splits the concatenated tokens into datums for a `per_datum` loss; None means
        the tokens are one datum.
        """
        tensors = self._tensors(logprobs_T, inputs)
        resolved = self.resolve_config(config)
        if self.per_datum and lengths_D is not None:
            import torch

            datums = zip(*(tensor.split(list(lengths_D)) for tensor in tensors), strict=True)
            return torch.cat([self.formula(*datum, **resolved) for datum in datums])
        return self.formula(*tensors, **resolved)

    def metrics(
        self,
        logprobs_T: torch.Tensor,
        inputs: Mapping[str, torch.Tensor],
        config: Mapping[str, float] | None = None,
        lengths_D: Sequence[int] | None = None,
    ) -> dict[str, float]:
        """The clip counts of a clipping loss (`clip_counts`); empty for the others."""
        if self.clip_view is None:
            return {}
        resolved = self.resolve_config(config)
        if self.per_datum and lengths_D is not None:
            import torch

            parts = [
                self.clip_view(lp_T, dict(zip(self.input_keys, datum, strict=True)), resolved)
                for lp_T, *datum in zip(
                    logprobs_T.split(list(lengths_D)),
                    *(inputs[key].split(list(lengths_D)) for key in self.input_keys),
                    strict=True,
                )
            ]
            ratio_T, advantages_T = torch.cat([r for r, _ in parts]), torch.cat([a for _, a in parts])
        else:
            ratio_T, advantages_T = self.clip_view(logprobs_T, inputs, resolved)
        dual = resolved.get("clip_ratio_c", math.inf)
        return clip_counts(ratio_T, advantages_T, resolved["clip_low_threshold"], resolved["clip_high_threshold"], dual)

    def __call__(
        self,
        logprobs_T: torch.Tensor,
        inputs: Mapping[str, torch.Tensor],
        config: Mapping[str, float] | None = None,
        lengths_D: Sequence[int] | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The summed loss over all tokens given, and its metrics: `loss:sum`, and for a clipping
        loss the clip counts and fractions (see `merge_loss_metrics`)."""
        loss = self.token_losses(logprobs_T, inputs, config, lengths_D).sum()
        counts = self.metrics(logprobs_T, inputs, config, lengths_D)
        return loss, merge_loss_metrics([{"loss:sum": float(loss.detach())}, counts])


def _check_clip_range(name: str, config: Mapping[str, float]) -> None:
    low, high = config.get("clip_low_threshold"), config.get("clip_high_threshold")
    if low is not None and high is not None and low > high:
        raise InvalidInputError(f"loss {name!r}: clip_low_threshold {low} is above clip_high_threshold {high}")
    if config.get("clip_ratio_c", math.inf) <= 1.0:
        raise InvalidInputError(f"loss {name!r}: clip_ratio_c (dual clip) must be > 1, got {config['clip_ratio_c']}")
    for key in ("temperature_pos", "temperature_neg"):
        if config.get(key, 1.0) <= 0.0:
            raise InvalidInputError(f"loss {name!r}: {key} must be > 0, got {config[key]}")
    if config.get("behaviour_weight_cap", math.inf) <= 0.0:
        raise InvalidInputError(
            f"loss {name!r}: behaviour_weight_cap must be > 0, got {config['behaviour_weight_cap']}"
        )


def _ppo_clip_view(
    logprobs_T: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> tuple[torch.Tensor, torch.Tensor]:
    return _token_ratio(logprobs_T, inputs["logprobs"]), inputs["advantages"]


def _gspo_clip_view(
    logprobs_T: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> tuple[torch.Tensor, torch.Tensor]:
    ratio_T = _sequence_ratio(logprobs_T, inputs["logprobs"], inputs[SEQUENCE_RATIO_MASK])
    return ratio_T, inputs["advantages"]


def _decoupled_clip_view(
    logprobs_T: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> tuple[torch.Tensor, torch.Tensor]:
    weights_T = behaviour_weights(inputs["logprobs"], inputs[PROXIMAL_LOGPROBS], config["behaviour_weight_cap"])
    return _token_ratio(logprobs_T, inputs[PROXIMAL_LOGPROBS]), weights_T * inputs["advantages"]


_RL_INPUTS = ("logprobs", "advantages")
SEQUENCE_RATIO_MASK = "sequence_ratio_mask"
"""The tokens whose ratios make up a sequence's ratio (gspo): the action tokens, in RL."""
PROXIMAL_LOGPROBS = "proximal_logprobs"
"""Decoupled PPO's proximal policy: per target token, the logprob the update is kept near."""

CROSS_ENTROPY = LossSpec("cross_entropy", cross_entropy, ("weights",), scaled_by="weights")
IMPORTANCE_SAMPLING = LossSpec("importance_sampling", importance_sampling, _RL_INPUTS, scaled_by="advantages")
PPO = LossSpec(
    "ppo", ppo, _RL_INPUTS, scaled_by="advantages", extension_keys=("clip_ratio_c",), clip_view=_ppo_clip_view
)
CISPO = LossSpec("cispo", cispo, _RL_INPUTS, scaled_by="advantages")
DRO = LossSpec("dro", dro, _RL_INPUTS)
SAPO = LossSpec("sapo", sapo, _RL_INPUTS, scaled_by="advantages", builtin=False)
VESPO = LossSpec(
    "vespo", vespo, (*_RL_INPUTS, SEQUENCE_RATIO_MASK), per_datum=True, scaled_by="advantages", builtin=False
)
GSPO = LossSpec(
    "gspo",
    gspo,
    (*_RL_INPUTS, SEQUENCE_RATIO_MASK),
    per_datum=True,
    scaled_by="advantages",
    clip_view=_gspo_clip_view,
)
DECOUPLED_PPO = LossSpec(
    "decoupled_ppo",
    decoupled_ppo,
    ("logprobs", PROXIMAL_LOGPROBS, "advantages"),
    scaled_by="advantages",
    builtin=False,
    clip_view=_decoupled_clip_view,
)

LOSS_SPECS: dict[str, LossSpec] = {
    spec.name: spec for spec in (CROSS_ENTROPY, IMPORTANCE_SAMPLING, PPO, CISPO, DRO, GSPO, DECOUPLED_PPO, SAPO, VESPO)
}
"""The losses by name: the built-ins, then those registered (`register_loss`). kitchen registers
each `kitchen.losses` entry point here; the built-ins' entry points name these same objects."""


ROLLOUT_INPUTS = frozenset({"logprobs", "advantages", SEQUENCE_RATIO_MASK, PROXIMAL_LOGPROBS})
"""What the RL workflow's datums carry (`train_core.rl.data_processing`), or its update adds
(`proximal_logprobs`: the trainer's logprobs before the update, for `decoupled_ppo`)."""


def is_policy_gradient(spec: LossSpec) -> bool:
    """Whether the RL workflow can feed `spec`: it reads advantages and nothing beyond what the
    workflow's datums carry."""
    return "advantages" in spec.input_keys and set(spec.input_keys) <= ROLLOUT_INPUTS


def rl_loss_names() -> tuple[str, ...]:
    """The policy-gradient losses registered now (`is_policy_gradient`)."""
    return tuple(name for name, spec in LOSS_SPECS.items() if is_policy_gradient(spec))


BUILTIN_LOSS_NAMES: frozenset[str] = frozenset(name for name, spec in LOSS_SPECS.items() if spec.builtin)
"""The losses the Tinker service runs itself."""


def register_loss(spec: LossSpec) -> None:
    """Add a loss (a plugin's, see `kitchen.engine.plugins`). Registering the same spec again changes
    nothing; another spec under a taken name is refused, so a plugin never shadows a built-in.
    A registered loss is never `builtin`: the Tinker service runs only its own."""
    present = LOSS_SPECS.get(spec.name)
    if present is spec:
        return
    if present is not None:
        raise ValueError(f"a loss named {spec.name!r} is already registered")
    if spec.builtin:
        raise ValueError(f"loss {spec.name!r}: only the Tinker service's own losses are builtin=True")
    LOSS_SPECS[spec.name] = spec


LossTable = Mapping[str, LossSpec]
"""Losses by name: what a backend is given to compute built-in losses with (`LOSS_SPECS` and the
losses plugins registered into it, or a table of its own)."""


def find_loss(table: LossTable, name: str) -> LossSpec:
    """The loss called `name` in `table`; unknown names raise an InvalidInputError listing the known ones."""
    try:
        return table[name]
    except KeyError:
        raise InvalidInputError(f"unknown loss_fn {name!r}; known losses: {sorted(table)}") from None


def get_loss_fn(name: str) -> LossSpec:
    """The loss called `name` in train_core's table (`find_loss`)."""
    return find_loss(LOSS_SPECS, name)
