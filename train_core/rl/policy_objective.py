"""The whole RL objective of an optimizer step, and which route it takes to the backend.

    loss = sum_d sum_t w_dt * (policy_dt + kl_coef * kl_dt - entropy_coeff * H_dt)

`policy` is a policy-gradient loss from the table (`train_core.losses`), `w` the aggregation's
per-token factors (below, 0 off the action mask), `kl` a per-token estimate
of KL(policy || reference) (`train_core.rl.kl_estimators`, from the datums' `reference_logprobs`)
and `H` the policy's per-token entropy; verl's actor loss `pg - entropy_coeff * H + kl_coef * kl`,
each term aggregated with the same mode.

The aggregation (verl's `loss_agg_mode`), with `L` the per-token loss and `m` the action mask of
B sequences (a sequence here is a datum):

    token_sum                 sum(L m)                            Tinker's losses, kitchen's default
    token_mean                sum(L m) / sum(m)                   DAPO
    seq_mean_token_sum        mean_b sum_t L m                    sequence as one action (RLOO)
    seq_mean_token_mean       mean_b (sum_t L m / sum_t m)        original GRPO
    seq_mean_token_sum_norm   sum(L m) / (B * norm_tokens)        Dr. GRPO (a constant normaliser)

`mean_b` and B count the sequences with at least one action token (verl leaves fully masked
sequences out). Each mode is a per-token scale factor `w` with `aggregate = sum(w L)`, which is
how it runs on a backend whose losses are sums over tokens (Tinker's): the factors multiply the
input that scales each token's loss linearly (the advantages, or cross-entropy's weights; see
`LossSpec.scaled_by`), so a built-in loss on the folded datums computes the aggregated loss.

Two routes run it:

- built-in: the loss by name on datums with `w` folded into their advantages (`builtin_data`).
  Possible when there is no KL or entropy term and the loss has an input that scales it; on the
  Tinker service, also only for its own losses and config keys.
- custom: `forward_backward_custom` with `custom_loss_fn`, which computes the formula above from
  the logprobs the backend returns. Needed for a KL term in the loss, and on the Tinker service for
  kitchen's own losses and config keys (dual clip, decoupled PPO).

The entropy bonus needs the policy's full distribution at each token, which the port's custom
loss does not get (`forward_backward_custom` gives only the target tokens' logprobs, and the Tinker
service linearises the custom loss in them): its custom loss takes `entropy_D=`, per-token
entropies with gradients that the local backend computes in the same forward pass (and hands to
any custom loss with that parameter); a backend that does not is refused when the loss runs.
`top_entropy_quantile` (TRL's rho, `train_core.rl.entropy_mask`) needs them too: it keeps the
policy term (and the entropy bonus) only on the batch's high-entropy action tokens.

The off-policy correction, for the sampler and the trainer disagreeing (bf16 against fp32,
another inference engine, stale weights in async mode) instead of pretending their logprobs are
equal. Per action token, `w = exp(lp_trainer - lp_sampler)`: the trainer's logprob is the proximal
policy's (the weights the update starts from, from a forward pass before it), the sampler's is the
one recorded at sampling. Two corrections, as verl's rollout correction defines them:

- truncated importance sampling (`tis`): each token's loss is multiplied by `min(w, cap)`, per
  token (`token`) or one weight per sequence from the product of its tokens' ratios (`sequence`);
- masked importance sampling (`mis`): tokens whose `w` leaves `[low, high]` (`token`), or whole
  sequences whose product (`sequence`) or geometric mean (`geometric`) of ratios does, are left
  out of the loss (mask and advantage 0). `low` defaults to `1 / high`.

Both are stop-gradient factors, so they fold into the datums' advantages: every policy loss whose
tokens scale with their advantage runs them unchanged, on every backend. Log-ratios are clamped to
[-20, 20] before exponentiating (verl's safety bound). A sequence is a datum.

Stream-minibatch mode trains an optimizer step's datums in `minibatches` parts submitted as they
arrive: each part is aggregated alone and weighted `1 / minibatches` (gradient accumulation, as
verl does); `token_sum` needs no weight (sums add up), and with equal parts the seq_mean modes are
exact, token_mean exact when the parts have equal action-token counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from train_core.batching import split_evenly
from train_core.errors import InvalidInputError
from train_core.losses import (
    ACTION_TOKENS_KEY,
    PROXIMAL_LOGPROBS,
    SEQUENCE_RATIO_MASK,
    get_loss_fn,
    loss_ratios,
    merge_loss_metrics,
)
from train_core.rl.data_processing import action_token_logprobs, remove_mask
from train_core.rl.entropy_mask import check_quantile, high_entropy_mask
from train_core.rl.kl_estimators import kl_estimate, kl_estimator_name
from train_core.rl.types import Metrics
from train_core.types import Datum, ForwardBackwardOutput, OptimStepOutput, TensorData

if TYPE_CHECKING:
    import torch

REFERENCE_LOGPROBS = "reference_logprobs"
"""Per target token, the reference model's logprob (for a KL term in the loss)."""

CustomLoss = Callable[[Sequence[Datum], "list[torch.Tensor]"], "tuple[torch.Tensor, dict[str, float]]"]


# -- aggregation: per-token factors -----------------------------------------------------------


AggregationMode = Literal[
    "token_sum", "token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm"
]


AGGREGATION_MODES: tuple[AggregationMode, ...] = get_args(AggregationMode)


def _check_aggregation(mode: str, norm_tokens: float | None) -> None:
    if mode not in AGGREGATION_MODES:
        raise InvalidInputError(f"unknown loss aggregation {mode!r}; known: {list(AGGREGATION_MODES)}")
    if mode == "seq_mean_token_sum_norm" and (norm_tokens is None or norm_tokens <= 0):
        raise InvalidInputError(f"seq_mean_token_sum_norm needs a positive constant norm_tokens, got {norm_tokens}")


def token_scales(masks_D: Sequence[torch.Tensor], mode: str, norm_tokens: float | None = None) -> list[torch.Tensor]:
    """Per datum, the factor each token's loss is multiplied by under `mode` (0 off the mask).

    The factors depend on the whole batch (token and sequence counts), so they must be computed
    over exactly the datums of one optimizer step.
    """
    _check_aggregation(mode, norm_tokens)
    floats_D = [mask_T.double() for mask_T in masks_D]
    tokens_D = [float(mask_T.sum()) for mask_T in floats_D]
    sequences = sum(1 for n in tokens_D if n > 0)
    if mode == "token_sum":
        return floats_D
    if mode == "token_mean":
        return [mask_T / max(sum(tokens_D), 1.0) for mask_T in floats_D]
    if mode == "seq_mean_token_sum":
        return [mask_T / max(sequences, 1) for mask_T in floats_D]
    if mode == "seq_mean_token_mean":
        return [mask_T / (max(n, 1.0) * max(sequences, 1)) for mask_T, n in zip(floats_D, tokens_D, strict=True)]
    assert norm_tokens is not None  # checked above
    return [mask_T / (max(sequences, 1) * norm_tokens) for mask_T in floats_D]


def aggregate_loss(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, mode: str, norm_tokens: float | None = None
) -> torch.Tensor:
    """The batch's loss under `mode` from per-token losses and the action mask, both [B, T]."""
    if loss_BT.shape != mask_BT.shape or loss_BT.dim() != 2:
        raise InvalidInputError(
            f"aggregate_loss needs [B, T] loss and mask, got {tuple(loss_BT.shape)} and {tuple(mask_BT.shape)}"
        )
    import torch

    scales_BT = torch.stack(token_scales(list(mask_BT), mode, norm_tokens)).to(loss_BT.dtype)
    # where, not a product: a token off the mask contributes nothing, even a NaN/inf loss there.
    return torch.where(scales_BT != 0, loss_BT * scales_BT, torch.zeros_like(loss_BT)).sum()


def fold_aggregation(
    data_D: Sequence[Datum], loss_fn: str, mode: str, norm_tokens: float | None = None, weight: float = 1.0
) -> list[Datum]:
    """The datums with `mode`'s token factors (times `weight`) multiplied into the input that
    scales `loss_fn` token by token, so the built-in (summing) loss computes the aggregated loss.

    The datums must still hold their `mask`. `token_sum` with weight 1 changes nothing. A loss with
    no such input (dro, whose drift term does not scale with the advantage) is an InvalidInputError.
    """
    _check_aggregation(mode, norm_tokens)
    if mode == "token_sum" and weight == 1.0:
        return list(data_D)
    key = get_loss_fn(loss_fn).scaled_by
    if key is None:
        raise InvalidInputError(
            f"loss {loss_fn!r} has no input that scales each token's loss, so loss aggregation {mode!r} "
            "cannot be folded into its datums; use token_sum or another loss"
        )
    masks_D = [datum.loss_fn_inputs["mask"].to_torch() for datum in data_D]
    folded_D = []
    for datum, scale_T in zip(data_D, token_scales(masks_D, mode, norm_tokens), strict=True):
        scaled_T = datum.loss_fn_inputs[key].to_torch().double() * scale_T * weight
        folded_D.append(
            Datum(datum.model_input, {**datum.loss_fn_inputs, key: TensorData.from_torch(scaled_T.float())})
        )
    return folded_D


# -- the objective ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyObjective:
    """What one optimizer step minimises; checked when built, so a bad setting fails at once."""

    loss_fn: str
    loss_fn_config: Mapping[str, float] | None = None
    aggregation: str = "token_sum"
    norm_tokens: float | None = None
    """The constant normaliser of `seq_mean_token_sum_norm` (e.g. max_tokens)."""
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coeff: float = 0.0
    minibatches: int = 1
    """The optimizer step's datums come in this many parts (see the module doc)."""
    top_entropy_quantile: float = 1.0
    """TRL's rho: the policy term counts only on the top-rho entropy quantile of action tokens (1 = all)."""

    def __post_init__(self) -> None:
        get_loss_fn(self.loss_fn).resolve_config(self.loss_fn_config)
        token_scales([], self.aggregation, self.norm_tokens)  # checks the mode and its normaliser
        kl_estimator_name(self.kl_estimator)
        if self.minibatches < 1:
            raise InvalidInputError(f"minibatches must be >= 1, got {self.minibatches}")
        if self.kl_coef < 0 or self.entropy_coeff < 0:
            raise InvalidInputError(
                f"kl_coef and entropy_coeff must be >= 0, got {self.kl_coef} and {self.entropy_coeff}"
            )
        try:
            check_quantile(self.top_entropy_quantile)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        if get_loss_fn(self.loss_fn).scaled_by is None and self.aggregation != "token_sum":
            raise InvalidInputError(
                f"loss {self.loss_fn!r} has a term that does not scale with the advantage, so it only "
                f"aggregates as token_sum (got {self.aggregation!r})"
            )

    def custom_route_reasons(self, service: bool) -> list[str]:
        """Why this objective cannot run as a built-in loss: on any backend, or (with `service`)
        on one that only runs the Tinker service's built-ins. Empty: the built-in route works."""
        spec = get_loss_fn(self.loss_fn)
        reasons = spec.custom_route_reasons(self.loss_fn_config) if service else []
        if self.kl_coef > 0:
            reasons.append(f"a KL term in the loss (kl_coef {self.kl_coef}, estimator {self.kl_estimator})")
        if self.entropy_coeff > 0:
            reasons.append(f"an entropy bonus (entropy_coeff {self.entropy_coeff})")
        if self.top_entropy_quantile < 1:
            reasons.append(f"high-entropy token masking (top_entropy_quantile {self.top_entropy_quantile})")
        return reasons

    @property
    def entropy_keys(self) -> list[str]:
        """The settings that need the policy's per-token entropies (empty: none does)."""
        return [
            key
            for key, on in (
                ("entropy_coeff", self.entropy_coeff > 0),
                ("top_entropy_quantile", self.top_entropy_quantile < 1),
            )
            if on
        ]

    @property
    def part_weight(self) -> float:
        """What one part's aggregated loss is multiplied by (1 unless stream minibatches)."""
        return 1.0 if self.aggregation == "token_sum" else 1.0 / self.minibatches

    def token_scales(self, data_D: Sequence[Datum]) -> list[torch.Tensor]:
        """Each datum's per-token factors: the aggregation over these datums, times `part_weight`."""
        masks_D = [datum.loss_fn_inputs["mask"].to_torch().double() for datum in data_D]
        return [scale_T * self.part_weight for scale_T in token_scales(masks_D, self.aggregation, self.norm_tokens)]

    def builtin_data(self, data_D: Sequence[Datum]) -> list[Datum]:
        """The datums for the built-in route: the aggregation folded into them, the mask removed."""
        folded_D = fold_aggregation(data_D, self.loss_fn, self.aggregation, self.norm_tokens, self.part_weight)
        return [remove_mask(datum, self.loss_fn) for datum in folded_D]

    def loss(
        self,
        data_D: Sequence[Datum],
        logprobs_D: Sequence[torch.Tensor],
        entropy_D: Sequence[torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The objective from each datum's current logprobs (and entropies, for the bonus), with
        its metrics: the loss's clip counts and the KL and entropy sums over action tokens (see
        `loss_ratios`). The datums keep their `mask` (and `reference_logprobs` for a KL term)."""
        import torch

        if self.entropy_keys and entropy_D is None:
            raise InvalidInputError(f"{', '.join(self.entropy_keys)} needs the policy's per-token entropy (entropy_D)")
        spec = get_loss_fn(self.loss_fn)
        masks_D = [datum.loss_fn_inputs["mask"].to_torch().double() for datum in data_D]
        scales_D = self.token_scales(data_D)
        keep_D: list[torch.Tensor] | None = None
        if self.top_entropy_quantile < 1:
            assert entropy_D is not None  # checked above
            keep_D = high_entropy_mask(entropy_D, masks_D, self.top_entropy_quantile)
        total = torch.zeros((), dtype=torch.float64)
        parts: list[dict[str, float]] = []
        kl_sum = entropy_sum = 0.0
        for index, (datum, logprobs_T) in enumerate(zip(data_D, logprobs_D, strict=True)):
            lp_T = logprobs_T.double()
            inputs = _loss_inputs(datum, spec.input_keys, f"datum {index}: loss {self.loss_fn!r}")
            terms_T = spec.token_losses(lp_T, inputs, self.loss_fn_config)
            if keep_D is not None:  # the policy term only: the KL term covers every action token
                terms_T = torch.where(keep_D[index], terms_T, torch.zeros_like(terms_T))
            parts.append(spec.metrics(lp_T, inputs, self.loss_fn_config))
            action_T = masks_D[index] > 0
            if self.kl_coef > 0:
                reference_T = _input(datum, REFERENCE_LOGPROBS, f"datum {index}: a KL term in the loss")
                kl_T = kl_estimate(lp_T, reference_T, self.kl_estimator)
                terms_T = terms_T + self.kl_coef * kl_T
                kl_sum += float(kl_T.detach()[action_T].sum())
            if self.entropy_coeff > 0:
                assert entropy_D is not None  # checked above
                entropy_T = entropy_D[index].double()
                if keep_D is not None:  # the bonus acts on the tokens the policy term keeps (TRL)
                    entropy_T = torch.where(keep_D[index], entropy_T, torch.zeros_like(entropy_T))
                terms_T = terms_T - self.entropy_coeff * entropy_T
                entropy_sum += float(entropy_T.detach()[action_T].sum())
            scale_T = scales_D[index]
            # where, not a product: off the mask nothing counts, even a NaN/inf term there.
            total = total + torch.where(scale_T != 0, terms_T * scale_T, torch.zeros_like(terms_T)).sum()
        sums = {ACTION_TOKENS_KEY: float(sum(float(m.sum()) for m in masks_D))}
        if self.kl_coef > 0:
            sums["loss/kl:sum"] = kl_sum
        if self.entropy_coeff > 0:
            sums["loss/entropy:sum"] = entropy_sum
        if keep_D is not None:
            sums["loss/high_entropy_tokens:sum"] = float(sum(float(keep_T.sum()) for keep_T in keep_D))
        return total, merge_loss_metrics([*parts, sums])

    def custom_loss_fn(self) -> CustomLoss:
        """The objective as a `forward_backward_custom` loss `(data, logprobs_D) -> (loss, metrics)`;
        with an entropy bonus or entropy masking it also takes `entropy_D=` (the local backend
        hands it over)."""
        if self.entropy_keys:

            def with_entropy(
                data_D: Sequence[Datum], logprobs_D: list[torch.Tensor], entropy_D: list[torch.Tensor] | None = None
            ) -> tuple[torch.Tensor, dict[str, float]]:
                if entropy_D is None:
                    raise InvalidInputError(
                        f"{', '.join(self.entropy_keys)}: this backend's forward_backward_custom does not "
                        "hand the loss per-token entropies (entropy_D); the local backend does"
                    )
                return self.loss(data_D, logprobs_D, entropy_D)

            return with_entropy

        def objective(data_D: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
            return self.loss(data_D, logprobs_D)

        return objective


def _input(datum: Datum, key: str, user: str) -> torch.Tensor:
    if key not in datum.loss_fn_inputs:
        raise InvalidInputError(f"{user} needs loss_fn_inputs[{key!r}] (it has {sorted(datum.loss_fn_inputs)})")
    return datum.loss_fn_inputs[key].to_torch().double()


def _loss_inputs(datum: Datum, keys: Sequence[str], user: str) -> dict[str, torch.Tensor]:
    """The loss's inputs from an RL datum: gspo's sequence-ratio mask is the action mask (as in
    `remove_mask`)."""
    return {key: _input(datum, "mask" if key == SEQUENCE_RATIO_MASK else key, user) for key in keys}


# -- off-policy correction -------------------------------------------------------------------


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


# -- the update's route and correction --------------------------------------------------------


PROXIMAL_LOSS = "importance_sampling"
"""The built-in loss a `forward` for the proximal logprobs names (every backend runs it; its value
is not used)."""


@dataclass(frozen=True)
class PolicyUpdate:
    """How a step's objective reaches the backend: the route (a built-in loss on datums with the
    aggregation folded in, or `forward_backward_custom` for a KL term, an entropy bonus, or a loss
    or config key the Tinker service does not run), and the off-policy correction (TIS / MIS
    folded into the datums after one `forward` for the proximal policy's logprobs; decoupled PPO,
    AReaL's loss for async training, reads the same logprobs as its proximal policy). The calls
    themselves are the caller's (`kitchen.families.rl.step`); everything here is pure."""

    objective: PolicyObjective
    custom: bool
    """Route through `forward_backward_custom` (else the built-in loss on folded datums)."""
    correction: RolloutCorrection | None

    @property
    def corrects(self) -> bool:
        return self.correction is not None and bool(self.correction.tis or self.correction.mis)

    @property
    def needs_proximal(self) -> bool:
        """A correction, or a loss that keeps the update near the proximal policy (decoupled PPO)."""
        return self.corrects or PROXIMAL_LOGPROBS in get_loss_fn(self.objective.loss_fn).input_keys

    def substeps(self, data_D: Sequence[Datum], num_substeps: int) -> list[list[Datum]]:
        """The step's datums as `num_substeps` optimizer steps (each aggregated alone)."""
        return split_evenly(data_D, num_substeps)

    def proximal_request(self, data_D: Sequence[Datum]) -> list[Datum]:
        """The datums the one `forward` (with `PROXIMAL_LOSS`) scores for the proximal logprobs."""
        inputs = get_loss_fn(PROXIMAL_LOSS).required_inputs
        return [Datum(d.model_input, {k: d.loss_fn_inputs[k] for k in inputs}) for d in data_D]

    def with_proximal(self, data_D: Sequence[Datum], proximal_D: Sequence[torch.Tensor]) -> tuple[list[Datum], Metrics]:
        """The datums with the correction folded in (and the mismatch metrics it measured), and for
        decoupled PPO the proximal logprobs as `proximal_logprobs`."""
        metrics: Metrics = {}
        prepared_D = list(data_D)
        if self.correction is not None and self.corrects:
            prepared_D, metrics = correct_off_policy(prepared_D, proximal_D, self.correction, self.objective.loss_fn)
        if PROXIMAL_LOGPROBS in get_loss_fn(self.objective.loss_fn).input_keys:
            prepared_D = [
                Datum(d.model_input, {**d.loss_fn_inputs, PROXIMAL_LOGPROBS: TensorData.from_torch(lp_T.float())})
                for d, lp_T in zip(prepared_D, proximal_D, strict=True)
            ]
        return prepared_D, metrics

    def metrics(self, data_D: Sequence[Datum], fb_outputs: Sequence[ForwardBackwardOutput]) -> Metrics:
        """The mismatch between the sampler's logprobs and the trainer's as the update computed them
        (unless the correction measured it against the proximal policy already), and the policy's
        mean token entropy over action tokens where the backend returned it (`optim/token_entropy`)."""
        trainer_D = training_logprobs(fb_outputs)
        metrics = {} if self.corrects else mismatch_metrics(data_D, trainer_D)
        entropy = action_token_entropy(data_D, fb_outputs)
        if entropy is not None:
            metrics["optim/token_entropy"] = entropy
        return metrics


def action_token_entropy(data_D: Sequence[Datum], fb_outputs: Sequence[ForwardBackwardOutput]) -> float | None:
    """The mean of the per-token entropies a backend returned (`entropy` outputs, the local
    backend's policy-gradient losses) over action tokens; None when it returned none."""
    entropies: list[torch.Tensor] = []
    for datum, out in zip(data_D, [out for fb in fb_outputs for out in fb.loss_fn_outputs], strict=True):
        if "entropy" not in out:
            return None
        entropies.append(out["entropy"].to_torch()[datum.loss_fn_inputs["mask"].to_torch() > 0])
    if not entropies:
        return None
    import torch

    values_N = torch.cat(entropies)
    return float(values_N.double().mean()) if values_N.numel() else None


# -- what an update reports -------------------------------------------------------------------


def compute_kl_sample_train(data_D: Sequence[Datum], training_logprobs_D: Sequence[torch.Tensor]) -> dict[str, float]:
    """How far the trainer's logprobs are from the sampler's, over action tokens (mask > 0).

    With `d = sampling - training`: v1 = mean(d) (unbiased KL estimate, can be negative),
    v2 = 0.5 * mean(d^2) (never negative); entropy = -mean(sampling logprob). On-policy with the
    same weights all of them but the entropy should be ~0. `data_D` must still hold its mask.
    """
    sampled_N, training_N = action_token_logprobs(data_D, training_logprobs_D, "training")
    if sampled_N.numel() == 0:
        raise ValueError("compute_kl_sample_train: the batch has no action tokens (mask > 0)")
    diffs_N = sampled_N - training_N
    return {
        "optim/kl_sample_train_v1": diffs_N.mean().item(),
        "optim/kl_sample_train_v2": 0.5 * (diffs_N**2).mean().item(),
        "optim/entropy": -sampled_N.mean().item(),
    }


def trained_tokens(data_D: Sequence[Datum]) -> float:
    """Action tokens the update trains on (mask > 0): sampled tokens less masked turns."""
    if not data_D:
        return 0.0
    return float((TensorData.concat([d.loss_fn_inputs["mask"] for d in data_D], "float32") > 0).sum().item())


def compute_kl_pre_post(data_D: Sequence[Datum], new_logprobs_D: Sequence[torch.Tensor]) -> Metrics:
    """How far the update moved the policy on the step's own action tokens (mask > 0): with
    `d = sampling logprob - new logprob`, `optim/kl_pre_post` = mean(d) (an estimate of
    KL(sampler || updated policy) on the sampled tokens) and `optim/kl_pre_post_v2` = 0.5 mean(d^2).
    Empty when no datum has an action token."""
    sampled_N, new_N = action_token_logprobs(data_D, new_logprobs_D, "new")
    if sampled_N.numel() == 0:
        return {}
    diffs_N = sampled_N - new_N
    return {"optim/kl_pre_post": diffs_N.mean().item(), "optim/kl_pre_post_v2": 0.5 * (diffs_N**2).mean().item()}


def training_logprobs(outputs: Sequence[ForwardBackwardOutput]) -> list[torch.Tensor]:
    """Per-datum training logprobs, in submission order."""
    return [out["logprobs"].to_torch() for fb in outputs for out in fb.loss_fn_outputs]


def train_step_metrics(
    data_D: Sequence[Datum], fb_outputs: Sequence[ForwardBackwardOutput], optim_outputs: Sequence[OptimStepOutput]
) -> Metrics:
    """A step's `forward_backward_metrics` and `optim_step_metrics` together."""
    return {**forward_backward_metrics(data_D, fb_outputs), **optim_step_metrics(optim_outputs)}


def forward_backward_metrics(data_D: Sequence[Datum], fb_outputs: Sequence[ForwardBackwardOutput]) -> Metrics:
    """Sampler/trainer agreement and entropy over action tokens (`data_D` still holds its masks;
    left out when every action token is masked), the summed loss, the trained token count
    (`tokens/trained`) and what the loss reported over the whole step (`loss_ratios`: clip
    fractions of a clipping loss, KL and entropy means)."""
    n_trained = trained_tokens(data_D)
    metrics = compute_kl_sample_train(data_D, training_logprobs(fb_outputs)) if n_trained else {}
    metrics["tokens/trained"] = n_trained
    loss_metrics = merge_loss_metrics([fb.metrics for fb in fb_outputs])
    metrics["optim/loss:sum"] = loss_metrics.get("loss:sum", 0.0)
    metrics.update(loss_ratios(loss_metrics))
    return metrics


def optim_step_metrics(optim_outputs: Sequence[OptimStepOutput]) -> Metrics:
    """The optimizer's metrics averaged over a step's substeps, and their count."""
    metrics: Metrics = {}
    keys = {key for out in optim_outputs for key in out.metrics}
    for key in sorted(keys):
        values = [out.metrics[key] for out in optim_outputs if key in out.metrics]
        metrics[f"optim/{key}"] = sum(values) / len(values)
    metrics["optim/substeps"] = float(len(optim_outputs))
    return metrics
