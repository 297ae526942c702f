"""The Tinker service's built-in loss functions, as pure torch.

Each loss is a sum over tokens (and so over datums, when the tokens of a batch are concatenated):
there is no mean, which is what makes gradients accumulate across `forward_backward` calls the
way the Tinker service's do. Notation: `logprobs_T` is the current policy's logprob of each target
token (carrying gradients), `sampling_logprobs_T` the sampler's, `advantages_T` the advantage of
each token, `ratio_T = exp(logprobs_T - sampling_logprobs_T)`.

Every loss but `gspo` is a sum of per-token terms; `gspo` couples the tokens of one datum (one
sequence) through its sequence ratio, so its spec is `per_datum` and backends hand it each datum's
length. A `LossSpec` binds a formula to the `loss_fn_inputs` keys it reads and the `loss_fn_config` keys
it accepts; `get_loss_fn(name)` looks one up and fails loudly on unknown names, so a typo can
never fall back to cross-entropy.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from train_core.errors import InvalidInputError

if TYPE_CHECKING:
    import torch

# The formulas use tensor methods only, and torch is imported where a tensor is made: importing
# this module (loss names and specs, for `kitchen validate`) does not load torch.


def cross_entropy(logprobs_T: torch.Tensor, weights_T: torch.Tensor) -> torch.Tensor:
    """Supervised loss: `-sum(lp * weights)`."""
    return -(logprobs_T * weights_T).sum()


def importance_sampling(
    logprobs_T: torch.Tensor, sampling_logprobs_T: torch.Tensor, advantages_T: torch.Tensor
) -> torch.Tensor:
    """REINFORCE with an importance weight for off-policy samples: `-sum(ratio * A)`."""
    ratio_T = (logprobs_T - sampling_logprobs_T).exp()
    return -(ratio_T * advantages_T).sum()


def ppo(
    logprobs_T: torch.Tensor,
    sampling_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    clip_low_threshold: float = 0.8,
    clip_high_threshold: float = 1.2,
) -> torch.Tensor:
    """Clipped surrogate: `-sum(min(ratio * A, clip(ratio, low, high) * A))`.

    The thresholds bound the ratio itself (0.8 / 1.2 is epsilon 0.2), as the Tinker service's are.
    """
    ratio_T = (logprobs_T - sampling_logprobs_T).exp()
    clipped_ratio_T = ratio_T.clamp(clip_low_threshold, clip_high_threshold)
    return -(ratio_T * advantages_T).minimum(clipped_ratio_T * advantages_T).sum()


def cispo(
    logprobs_T: torch.Tensor,
    sampling_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    clip_low_threshold: float = 0.0,
    clip_high_threshold: float = 4.0,
) -> torch.Tensor:
    """Clipped-ratio policy gradient: `-sum(stopgrad(clip(ratio, low, high)) * lp * A)`.

    The clipped ratio is only a coefficient, so no token's gradient is ever zeroed. The defaults
    (no lower bound, cap at 4) are the Tinker service's.
    """
    ratio_T = (logprobs_T - sampling_logprobs_T).exp()
    coefficient_T = ratio_T.clamp(clip_low_threshold, clip_high_threshold).detach()
    return -(coefficient_T * logprobs_T * advantages_T).sum()


def dro(
    logprobs_T: torch.Tensor, sampling_logprobs_T: torch.Tensor, advantages_T: torch.Tensor, beta: float
) -> torch.Tensor:
    """Policy gradient with a quadratic penalty on drift: `-sum(lp * A - 0.5 * beta * (lp - q)^2)`."""
    drift_T = logprobs_T - sampling_logprobs_T
    return -(logprobs_T * advantages_T - 0.5 * beta * drift_T**2).sum()


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
        loss = -sum_t min(s_t * A_t, clip(s_t, low, high) * A_t)

    Clipping the sequence ratio keeps or drops the whole sequence at once, where ppo clips tokens
    one by one; per-token advantages still apply. Config: `clip_low_threshold` and
    `clip_high_threshold` bound the ratio itself, as ppo's do; the defaults are the GSPO paper's
    clip range (epsilon 3e-4 below, 4e-4 above). Tinker's published GSPO page gives the formula and
    the `sequence_ratio_mask` input but, as far as we could read it, not its config keys or
    defaults, and the tinker backend sends the config as given: set both thresholds when runs must
    agree across backends.
    """
    in_ratio_T = sequence_ratio_mask_T != 0
    drift_T = logprobs_T.detach() - sampling_logprobs_T
    log_ratio = drift_T[in_ratio_T].mean() if bool(in_ratio_T.any()) else drift_T.new_zeros(())
    ratio_T = (log_ratio + logprobs_T - logprobs_T.detach()).exp()
    clipped_ratio_T = ratio_T.clamp(clip_low_threshold, clip_high_threshold)
    return -(ratio_T * advantages_T).minimum(clipped_ratio_T * advantages_T).sum()


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


@dataclass(frozen=True)
class LossSpec:
    """A named loss: its formula, the `loss_fn_inputs` it reads, and the config keys it accepts."""

    name: str
    formula: Callable[..., torch.Tensor]
    input_keys: tuple[str, ...]
    """The `loss_fn_inputs` tensors passed to `formula` after `logprobs_T`, in order."""
    per_datum: bool = False
    """The formula couples the tokens of a datum, so it runs on each datum and the results add up."""

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
        return resolved

    def __call__(
        self,
        logprobs_T: torch.Tensor,
        inputs: Mapping[str, torch.Tensor],
        config: Mapping[str, float] | None = None,
        lengths_D: Sequence[int] | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Compute the summed loss over all tokens given and its `loss:sum` metric.

        `lengths_D` splits the concatenated tokens into datums for a `per_datum` loss; None means
        the tokens are one datum.
        """
        require_inputs(inputs.keys(), self.input_keys, f"loss {self.name!r}", where="loss inputs")
        tensors = [logprobs_T, *(inputs[key] for key in self.input_keys)]
        resolved = self.resolve_config(config)
        if self.per_datum and lengths_D is not None:
            import torch

            datums = zip(*(tensor.split(list(lengths_D)) for tensor in tensors), strict=True)
            loss = torch.stack([self.formula(*datum, **resolved) for datum in datums]).sum()
        else:
            loss = self.formula(*tensors, **resolved)
        return loss, {"loss:sum": float(loss.detach())}


_RL_INPUTS = ("logprobs", "advantages")
SEQUENCE_RATIO_MASK = "sequence_ratio_mask"
"""The tokens whose ratios make up a sequence's ratio (gspo): the action tokens, in RL."""

LOSS_SPECS: dict[str, LossSpec] = {
    spec.name: spec
    for spec in (
        LossSpec("cross_entropy", cross_entropy, ("weights",)),
        LossSpec("importance_sampling", importance_sampling, _RL_INPUTS),
        LossSpec("ppo", ppo, _RL_INPUTS),
        LossSpec("cispo", cispo, _RL_INPUTS),
        LossSpec("dro", dro, _RL_INPUTS),
        LossSpec("gspo", gspo, (*_RL_INPUTS, SEQUENCE_RATIO_MASK), per_datum=True),
    )
}


RL_LOSS_NAMES: tuple[str, ...] = tuple(name for name, spec in LOSS_SPECS.items() if "advantages" in spec.input_keys)
"""The policy-gradient losses: those that read advantages."""


def get_loss_fn(name: str) -> LossSpec:
    """The loss called `name`; unknown names raise a InvalidInputError listing the known ones."""
    try:
        return LOSS_SPECS[name]
    except KeyError:
        raise InvalidInputError(f"unknown loss_fn {name!r}; known losses: {sorted(LOSS_SPECS)}") from None
