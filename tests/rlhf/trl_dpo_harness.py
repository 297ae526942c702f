"""TRL's `DPOTrainer._compute_loss` and kitchen's DPO custom loss on the same per-token tensors,
for the parity tests and `benchmarks/trl_parity.py`.

TRL's method runs on a minimal trainer object whose model returns the case's per-token logprobs
(what TRL's fused LM head returns: 0 where the label is -100) and, for WPO, each position's
`log sum_v p_v^2`; a real trainer needs a model, optimizer and dataset to be built, and nothing
else of it is used. The reference model is called (not precomputed) so that `ld_alpha` weighs the
reference's logprobs as it weighs the policy's. kitchen's side is `make_dpo_custom_loss` on
interleaved datums (`[c0, r0, c1, r1, ...]`, TRL's rows are `[c0 .. cP-1, r0 .. rP-1]`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from trl.trainer.dpo_trainer import DPOTrainer

from train_core.preference.dpo import make_dpo_custom_loss
from train_core.preference.losses import PreferenceLossParams, PreferenceObjective
from train_core.supervised import datum_from_tokens_weights
from train_core.types import Datum


@dataclass(frozen=True)
class DPOCase:
    """P pairs of per-token logprobs over rows of `length` tokens; row i's completion is its last
    `lengths[i]` tokens (`lengths` lists the P chosen rows, then the P rejected ones)."""

    policy_RT: torch.Tensor
    reference_RT: torch.Tensor
    log_sum_sq_RT: torch.Tensor
    lengths: tuple[int, ...]

    @property
    def pairs(self) -> int:
        return len(self.lengths) // 2

    @property
    def mask_RL(self) -> torch.Tensor:
        """TRL's `completion_mask` over the rows' `length + 1` input tokens (position 0 is prompt)."""
        mask = torch.zeros(len(self.lengths), self.policy_RT.shape[1] + 1)
        for row, n in enumerate(self.lengths):
            if n:
                mask[row, -n:] = 1.0
        return mask


def random_case(seed: int, lengths: Sequence[int], dtype: torch.dtype = torch.float64, spread: float = 3.0) -> DPOCase:
    """Token logprobs uniform in (-spread, 0]; `log sum p^2` between `2 lp` and 0 (it is never
    below the target's own `2 lp`)."""
    generator = torch.Generator().manual_seed(seed)
    shape = (len(lengths), max(lengths) + 2)
    policy = -torch.rand(shape, generator=generator, dtype=torch.float64) * spread
    reference = -torch.rand(shape, generator=generator, dtype=torch.float64) * spread
    log_sum_sq = 2 * policy * torch.rand(shape, generator=generator, dtype=torch.float64)
    return DPOCase(policy.to(dtype), reference.to(dtype), log_sum_sq.to(dtype), tuple(lengths))


@dataclass(frozen=True)
class DPOSettings:
    """TRL's DPOConfig keys that the loss reads, kitchen's names beside them."""

    loss_type: tuple[str, ...] = ("sigmoid",)
    loss_weights: tuple[float, ...] | None = None
    beta: float = 0.3
    label_smoothing: float = 0.0
    f_divergence_type: str = "reverse_kl"
    f_alpha_divergence_coef: float = 0.5
    discopop_tau: float = 0.05
    simpo_gamma: float = 0.5
    """kitchen's `simpo` (TRL's CPO simpo_gamma)."""
    ld_alpha: float | None = None
    use_weighting: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def objective(self) -> PreferenceObjective:
        weights = self.loss_weights or (1.0,) * len(self.loss_type)
        params = PreferenceLossParams(
            beta=self.beta,
            label_smoothing=self.label_smoothing,
            discopop_tau=self.discopop_tau,
            simpo_gamma=self.simpo_gamma,
            f_divergence=self.f_divergence_type,  # type: ignore[arg-type]
            f_alpha=self.f_alpha_divergence_coef,
        )
        return PreferenceObjective(tuple(zip(self.loss_type, weights, strict=True)), params, self.use_weighting)


class _Scores(torch.nn.Module):
    """A stand-in model (TRL's trainer checks it is a module) returning fixed per-token outputs."""

    is_gradient_checkpointing = False

    def __init__(self, outputs: Callable[[], SimpleNamespace]) -> None:
        super().__init__()
        self._outputs = outputs

    def forward(self, **kwargs: Any) -> SimpleNamespace:
        return self._outputs()


def trl_loss(settings: DPOSettings, case: DPOCase, policy_RT: torch.Tensor) -> torch.Tensor:
    """TRL 1.16's `DPOTrainer._compute_loss` on the case (gradients flow into `policy_RT`)."""
    mask = case.mask_RL
    shift = mask[:, 1:].to(policy_RT.dtype)
    rows, width = mask.shape

    def outputs(log_probs: torch.Tensor) -> SimpleNamespace:
        zeros = torch.zeros_like(log_probs)
        return SimpleNamespace(
            log_probs=log_probs,
            entropy=zeros,
            mean_logits=zeros,
            is_top1=zeros.bool(),
            log_sum_sq_probs=case.log_sum_sq_RT * shift,
        )

    model, ref_model = _Scores(lambda: outputs(policy_RT * shift)), _Scores(lambda: outputs(case.reference_RT * shift))
    trainer = SimpleNamespace(
        model=model,
        ref_model=ref_model,
        args=SimpleNamespace(discopop_tau=settings.discopop_tau, gradient_checkpointing_kwargs=None),
        accelerator=SimpleNamespace(device="cpu", gather_for_metrics=lambda t: t, gather=lambda t: t),
        aux_loss_enabled=False,
        ld_alpha=settings.ld_alpha,
        precompute_ref_logps=False,
        f_divergence_type=settings.f_divergence_type,
        f_alpha_divergence_coef=settings.f_alpha_divergence_coef,
        loss_types=list(settings.loss_type),
        loss_weights=list(settings.loss_weights or [1.0] * len(settings.loss_type)),
        beta=settings.beta,
        label_smoothing=settings.label_smoothing,
        use_weighting=settings.use_weighting,
        _metrics=defaultdict(lambda: defaultdict(list)),
        _total_train_tokens=0,
        _tp_size=1,
    )
    inputs = {
        "input_ids": torch.zeros(rows, width, dtype=torch.long),
        "attention_mask": torch.ones(rows, width, dtype=torch.long),
        "completion_mask": mask.long(),
    }
    compute_loss: Any = DPOTrainer._compute_loss  # called on a stand-in trainer (module doc)
    return compute_loss(trainer, model, inputs, return_outputs=False)


def interleaved(case: DPOCase, rows_RT: torch.Tensor) -> list[torch.Tensor]:
    """TRL's `[chosen.., rejected..]` rows as kitchen's `[c0, r0, c1, r1, ...]` datums' tensors
    (views: gradients flow back to `rows_RT`)."""
    return [rows_RT[(index % 2) * case.pairs + index // 2] for index in range(2 * case.pairs)]


def kitchen_data(case: DPOCase) -> list[Datum]:
    """One datum per row, interleaved; weights 1 on the completion's target positions."""
    shift = case.mask_RL[:, 1:]
    data = []
    for weights_T in interleaved(case, shift):
        tokens = [1] * (weights_T.numel() + 1)
        data.append(datum_from_tokens_weights(tokens, [0.0, *weights_T.tolist()]))
    return data


def kitchen_loss(settings: DPOSettings, case: DPOCase, policy_RT: torch.Tensor) -> torch.Tensor:
    """kitchen's DPO custom loss (`make_dpo_custom_loss`) on the case."""
    loss_fn: Any = make_dpo_custom_loss(interleaved(case, case.reference_RT), settings.objective(), settings.ld_alpha)
    data, logprobs_D = kitchen_data(case), interleaved(case, policy_RT)
    if settings.use_weighting:
        loss, _ = loss_fn(data, logprobs_D, log_sum_sq_probs_D=interleaved(case, case.log_sum_sq_RT))
    else:
        loss, _ = loss_fn(data, logprobs_D)
    return loss


def compare(settings: DPOSettings, case: DPOCase) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """(kitchen's loss, TRL's loss, max |value diff|, max |gradient diff|) on the case."""
    ours_RT = case.policy_RT.clone().requires_grad_(True)
    theirs_RT = case.policy_RT.clone().requires_grad_(True)
    ours, theirs = kitchen_loss(settings, case, ours_RT), trl_loss(settings, case, theirs_RT)
    ours.backward()
    theirs.backward()
    assert ours_RT.grad is not None and theirs_RT.grad is not None
    grad_diff = float((ours_RT.grad - theirs_RT.grad).abs().max())
    return ours.detach(), theirs.detach(), float((ours - theirs).detach().abs()), grad_diff
