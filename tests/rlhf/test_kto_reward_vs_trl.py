"""KTO and the Bradley-Terry reward-model loss against TRL's own code on the same tensors: loss
value and gradient. TRL's `KTOTrainer._compute_loss` and `RewardTrainer.compute_loss` run on
minimal trainer objects whose model returns the test's tensors (a real trainer needs a model,
optimizer and dataset to be built; nothing else of it is used). TRL is in the test extra: never skipped."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from trl.trainer.kto_trainer import KTOTrainer
from trl.trainer.reward_trainer import RewardTrainer

from train_core.preference.bradley_terry import bradley_terry_loss
from train_core.preference.kto import KtoParams, kto_from_token_logprobs

# TRL's loss methods run on stand-in trainers (the module doc): typed loosely.
KTO: Any = KTOTrainer
REWARD: Any = RewardTrainer

pytestmark = pytest.mark.slow  # importing TRL takes 10-50 s on 2 cores

EXAMPLES, LENGTH = 6, 9
LABELS = [True, False, False, True, True, False]


def _mask(lengths: list[int]) -> torch.Tensor:
    mask = torch.zeros(EXAMPLES, LENGTH)
    for row, n in enumerate(lengths):
        mask[row, LENGTH - n :] = 1.0
    return mask


def _logprobs(seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return -torch.rand(EXAMPLES, LENGTH - 1, generator=generator, dtype=torch.float64) * 3.0


def _metrics() -> defaultdict[str, defaultdict[str, list[float]]]:
    return defaultdict(lambda: defaultdict(list))


def _trl_kto(
    policy_T: torch.Tensor,
    kl_T: torch.Tensor,
    ref: torch.Tensor,
    ref_kl: torch.Tensor,
    params: KtoParams,
    mask: torch.Tensor,
    kl_mask: torch.Tensor,
) -> torch.Tensor:
    ids, kl_ids = torch.zeros(EXAMPLES, LENGTH, dtype=torch.long), torch.ones(EXAMPLES, LENGTH, dtype=torch.long)

    def model(**kwargs: Any) -> SimpleNamespace:
        # What TRL's fused LM head returns: logprobs of the labels (0 where the label is -100).
        kl = kwargs["input_ids"] is kl_ids
        lp = kl_T * kl_mask[:, 1:] if kl else policy_T * mask[:, 1:]
        zeros = torch.zeros_like(lp)
        return SimpleNamespace(log_probs=lp, entropy=zeros, mean_logits=zeros)

    model.training = True  # type: ignore[attr-defined]
    trainer = SimpleNamespace(
        model=model,
        accelerator=SimpleNamespace(device="cpu", gather_for_metrics=lambda t: t, gather=lambda t: t),
        calculate_KL=True,
        aux_loss_enabled=False,
        precompute_ref_logps=True,
        loss_type="kto",
        beta=params.beta,
        desirable_weight=params.desirable_weight,
        undesirable_weight=params.undesirable_weight,
        _metrics=_metrics(),
        _total_train_tokens=0,
        _tp_size=1,
    )
    trainer._compute_kl_logps = lambda m, batch: KTO._compute_kl_logps(trainer, m, batch)
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "completion_mask": mask.long(),
        "KL_input_ids": kl_ids,
        "KL_attention_mask": torch.ones_like(kl_ids),
        "KL_completion_mask": kl_mask.long(),
        "label": torch.tensor(LABELS),
        "ref_logps": ref,
        "ref_KL_logps": ref_kl,
    }
    return KTO._compute_loss(trainer, model, inputs, return_outputs=False)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("weights", [(1.0, 1.0), (1.0, 1.33)], ids=["equal", "undesirable_up"])
def test_kto_value_and_gradient_equal_trls(seed: int, weights: tuple[float, float]) -> None:
    params = KtoParams(beta=0.3, desirable_weight=weights[0], undesirable_weight=weights[1])
    mask, kl_mask = _mask([3, 8, 5, 6, 2, 7]), _mask([7, 3, 8, 5, 6, 2])
    ref_T, ref_kl_T = _logprobs(100 + seed), _logprobs(200 + seed)
    # The KL term: seed 2 puts the policy below the reference on the mismatched pairs (clamped to 0).
    kl_T = _logprobs(300 + seed) - (2.0 if seed == 2 else -0.3)
    ours_T = _logprobs(seed).requires_grad_(True)
    theirs_T = ours_T.detach().clone().requires_grad_(True)

    weights_D = [*mask[:, 1:].double(), *kl_mask[:, 1:].double()]
    ours, metrics = kto_from_token_logprobs([*ours_T, *kl_T], [*ref_T, *ref_kl_T], weights_D, LABELS, params)
    ref, ref_kl = (ref_T * mask[:, 1:]).sum(1), (ref_kl_T * kl_mask[:, 1:]).sum(1)
    theirs = _trl_kto(theirs_T, kl_T, ref, ref_kl, params, mask.double(), kl_mask.double())
    ours.backward()
    theirs.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    assert ours_T.grad is not None and theirs_T.grad is not None
    torch.testing.assert_close(ours_T.grad.double(), theirs_T.grad, rtol=1e-5, atol=1e-7)
    assert ours_T.grad.abs().sum() > 0
    assert (metrics["kl"] == 0.0) == (seed == 2)


@pytest.mark.parametrize("coefficient", [None, 0.01])
def test_reward_model_loss_equals_trls(coefficient: float | None) -> None:
    generator = torch.Generator().manual_seed(7)
    scores = torch.randn(2 * EXAMPLES, 1, generator=generator, dtype=torch.float64)
    ours_scores = scores.clone().requires_grad_(True)
    theirs_scores = scores.clone().requires_grad_(True)
    ours, _ = bradley_terry_loss(ours_scores[:EXAMPLES, 0], ours_scores[EXAMPLES:, 0], coefficient or 0.0)

    def model(**kwargs: Any) -> SimpleNamespace:
        return SimpleNamespace(logits=theirs_scores)  # a sequence-classification model's [2P, 1] scores

    model.training = True  # type: ignore[attr-defined]
    trainer = SimpleNamespace(
        model=model,
        args=SimpleNamespace(center_rewards_coefficient=coefficient),
        accelerator=SimpleNamespace(device="cpu", gather_for_metrics=lambda t: t, gather=lambda t: t),
        _metrics=_metrics(),
        _total_train_tokens=0,
        _tp_size=1,
    )
    inputs = {
        "input_ids": torch.zeros(2 * EXAMPLES, 3, dtype=torch.long),
        "attention_mask": torch.ones(2 * EXAMPLES, 3),
    }
    theirs = REWARD.compute_loss(trainer, model, inputs)
    ours.backward()
    theirs.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-10)
    assert ours_scores.grad is not None and theirs_scores.grad is not None
    torch.testing.assert_close(ours_scores.grad, theirs_scores.grad, rtol=1e-9, atol=1e-12)
