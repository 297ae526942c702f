"""The whole RL objective of an optimizer step, and which route it takes to the backend.

    loss = sum_d sum_t w_dt * (policy_dt + kl_coef * kl_dt - entropy_coeff * H_dt)

`policy` is a policy-gradient loss from the table (`train_core.losses`), `w` the aggregation's
per-token factors (`train_core.rl.aggregation`, 0 off the action mask), `kl` a per-token estimate
of KL(policy || reference) (`train_core.rl.kl_estimators`, from the datums' `reference_logprobs`)
and `H` the policy's per-token entropy; verl's actor loss `pg - entropy_coeff * H + kl_coef * kl`,
each term aggregated with the same mode.

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

Stream-minibatch mode trains an optimizer step's datums in `minibatches` parts submitted as they
arrive: each part is aggregated alone and weighted `1 / minibatches` (gradient accumulation, as
verl does); `token_sum` needs no weight (sums add up), and with equal parts the seq_mean modes are
exact, token_mean exact when the parts have equal action-token counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from train_core.errors import InvalidInputError
from train_core.losses import ACTION_TOKENS_KEY, SEQUENCE_RATIO_MASK, get_loss_fn, merge_loss_metrics
from train_core.rl.aggregation import fold_aggregation, token_scales
from train_core.rl.data_processing import remove_mask
from train_core.rl.kl_estimators import kl_estimate, kl_estimator_name
from train_core.types import Datum

if TYPE_CHECKING:
    import torch

REFERENCE_LOGPROBS = "reference_logprobs"
"""Per target token, the reference model's logprob (for a KL term in the loss)."""

CustomLoss = Callable[[Sequence[Datum], "list[torch.Tensor]"], "tuple[torch.Tensor, dict[str, float]]"]


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
        return reasons

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

        if self.entropy_coeff > 0 and entropy_D is None:
            raise InvalidInputError("entropy_coeff > 0 needs the policy's per-token entropy (entropy_D)")
        spec = get_loss_fn(self.loss_fn)
        masks_D = [datum.loss_fn_inputs["mask"].to_torch().double() for datum in data_D]
        scales_D = self.token_scales(data_D)
        total = torch.zeros((), dtype=torch.float64)
        parts: list[dict[str, float]] = []
        kl_sum = entropy_sum = 0.0
        for index, (datum, logprobs_T) in enumerate(zip(data_D, logprobs_D, strict=True)):
            lp_T = logprobs_T.double()
            inputs = _loss_inputs(datum, spec.input_keys, f"datum {index}: loss {self.loss_fn!r}")
            terms_T = spec.token_losses(lp_T, inputs, self.loss_fn_config)
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
        return total, merge_loss_metrics([*parts, sums])

    def custom_loss_fn(self) -> CustomLoss:
        """The objective as a `forward_backward_custom` loss `(data, logprobs_D) -> (loss, metrics)`;
        with an entropy bonus it also takes `entropy_D=` (the local backend hands it over)."""
        if self.entropy_coeff > 0:

            def with_entropy(
                data_D: Sequence[Datum], logprobs_D: list[torch.Tensor], entropy_D: list[torch.Tensor] | None = None
            ) -> tuple[torch.Tensor, dict[str, float]]:
                if entropy_D is None:
                    raise InvalidInputError(
                        f"entropy_coeff {self.entropy_coeff}: this backend's forward_backward_custom does not "
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
