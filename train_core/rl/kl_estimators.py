"""Per-token estimators of KL(policy || reference) for a KL term in the loss (Schulman's k1/k2/k3).

With `lp` the policy's and `ref` the reference's logprob of a sampled token and `d = ref - lp`:

    k1  = lp - ref                   unbiased for the KL's value, high variance, can be negative
    k2  = (lp - ref)^2 / 2           biased value, but its gradient is the KL's gradient in expectation
    k3  = exp(d) - d - 1             unbiased and low-variance value, always >= 0 ("low_var_kl")
    k1+, k3+                         k1's or k3's value with k2's gradient (straight through)

The "+" variants exist because the expected gradient of k1 and k3 is not the gradient of the KL,
while k2's is. k3 clamps `d` to [-20, 20] and its value to [-10, 10], as verl does, so one token
the reference finds impossible cannot make the loss overflow. verl's names are accepted too
(`kl` = k1, `mse` = k2, `low_var_kl` = k3, `low_var_kl+` = k3+).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

from train_core.errors import InvalidInputError

if TYPE_CHECKING:
    import torch

KLEstimator = Literal["k1", "k2", "k3", "k1+", "k3+"]
KL_ESTIMATORS: tuple[KLEstimator, ...] = get_args(KLEstimator)
KL_ESTIMATOR_ALIASES: dict[str, KLEstimator] = {
    "kl": "k1",
    "mse": "k2",
    "low_var_kl": "k3",
    "low_var_kl+": "k3+",
    "k2+": "k2",
}
"""verl's names for the same estimators (`k2+` is k2: its gradient already is k2's)."""

K3_LOG_RATIO_BOUND = 20.0
K3_VALUE_BOUND = 10.0


def kl_estimator_name(name: str) -> KLEstimator:
    """The canonical estimator for `name` (ours or verl's); unknown names are an InvalidInputError."""
    canonical: dict[str, KLEstimator] = {**{n: n for n in KL_ESTIMATORS}, **KL_ESTIMATOR_ALIASES}
    if name in canonical:
        return canonical[name]
    raise InvalidInputError(
        f"unknown KL estimator {name!r}; known: {list(KL_ESTIMATORS)} (or verl's {sorted(KL_ESTIMATOR_ALIASES)})"
    )


def _k2(logprobs_T: torch.Tensor, reference_logprobs_T: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logprobs_T - reference_logprobs_T) ** 2


def _value(logprobs_T: torch.Tensor, reference_logprobs_T: torch.Tensor, base: str) -> torch.Tensor:
    if base == "k1":
        return logprobs_T - reference_logprobs_T
    if base == "k2":
        return _k2(logprobs_T, reference_logprobs_T)
    d_T = (reference_logprobs_T - logprobs_T).clamp(-K3_LOG_RATIO_BOUND, K3_LOG_RATIO_BOUND)
    return (d_T.exp() - d_T - 1).clamp(-K3_VALUE_BOUND, K3_VALUE_BOUND)


def kl_estimate(logprobs_T: torch.Tensor, reference_logprobs_T: torch.Tensor, estimator: str) -> torch.Tensor:
    """The per-token KL estimate under `estimator` (differentiable in `logprobs_T`)."""
    name = kl_estimator_name(estimator)
    value_T = _value(logprobs_T, reference_logprobs_T, name.removesuffix("+"))
    if not name.endswith("+"):
        return value_T
    k2_T = _k2(logprobs_T, reference_logprobs_T)
    return k2_T - k2_T.detach() + value_T.detach()
